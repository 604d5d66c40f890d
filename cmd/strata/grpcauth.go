package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"os"
	"sync"

	"golang.org/x/crypto/bcrypt"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"gopkg.in/yaml.v3"
)

// basicAuth checks gRPC requests against the basic_auth_users of the web
// configuration file (exporter-toolkit's format, which the HTTP endpoints
// enforce), as the HTTP endpoints do: the file is read at every request, so
// a change applies without a restart; a request needs the credentials only
// while it lists users; passwords are bcrypt hashes, and a check's outcome
// is cached by user, hash and password, so a sender that exports every few
// seconds pays for bcrypt once. OpenTelemetry's exporters send basic auth
// as the "authorization" metadata (the Collector's basicauth extension).
type basicAuth struct {
	path string

	bcryptMu sync.Mutex // one bcrypt at a time, as exporter-toolkit does
	mu       sync.Mutex
	cache    map[[sha256.Size]byte]bool
}

// basicAuthCacheSize bounds the outcomes kept (exporter-toolkit keeps 100).
const basicAuthCacheSize = 100

// fakeHash is compared against when the user is unknown, so that the
// answer takes a bcrypt's time either way (exporter-toolkit's, of
// "fakepassword").
const fakeHash = "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi"

func newBasicAuth(path string) *basicAuth {
	return &basicAuth{path: path, cache: map[[sha256.Size]byte]bool{}}
}

// users reads the file's basic_auth_users.
func (a *basicAuth) users() (map[string]string, error) {
	b, err := os.ReadFile(a.path)
	if err != nil {
		return nil, err
	}
	var c struct {
		Users map[string]string `yaml:"basic_auth_users"`
	}
	if err := yaml.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("parse %s: %w", a.path, err)
	}
	return c.Users, nil
}

// check returns nil when ctx's request may proceed, else the gRPC status
// to answer with: Unauthenticated for missing or wrong credentials (which
// an OTLP exporter does not retry), Internal when the file cannot be read.
func (a *basicAuth) check(ctx context.Context) error {
	users, err := a.users()
	if err != nil {
		return grpcstatus.Errorf(codes.Internal, "read the web configuration: %v", err)
	}
	if len(users) == 0 {
		return nil
	}
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) != 1 {
		return grpcstatus.Error(codes.Unauthenticated, `basic auth required: send the "authorization" metadata ("Basic " and base64 of user:password), as the web configuration's basic_auth_users ask`)
	}
	user, pass, ok := (&http.Request{Header: http.Header{"Authorization": vals}}).BasicAuth()
	if !ok {
		return grpcstatus.Error(codes.Unauthenticated, `the "authorization" metadata is not basic auth ("Basic " and base64 of user:password)`)
	}
	hash, known := users[user]
	if !known {
		hash = fakeHash
	}
	if !a.verify(user, hash, pass) || !known {
		return grpcstatus.Error(codes.Unauthenticated, "wrong user or password")
	}
	return nil
}

// verify reports whether pass matches the bcrypt hash, from the cache
// when this user, hash and password were checked before.
func (a *basicAuth) verify(user, hash, pass string) bool {
	h := sha256.New()
	for _, s := range []string{user, hash, pass} {
		_, _ = fmt.Fprintf(h, "%d:%s", len(s), s) // a hash.Hash never fails to write
	}
	var key [sha256.Size]byte
	h.Sum(key[:0])
	a.mu.Lock()
	ok, cached := a.cache[key]
	a.mu.Unlock()
	if cached {
		return ok
	}
	a.bcryptMu.Lock()
	ok = bcrypt.CompareHashAndPassword([]byte(hash), []byte(pass)) == nil
	a.bcryptMu.Unlock()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.cache) >= basicAuthCacheSize {
		for k := range a.cache { // any one: map order is random
			delete(a.cache, k)
			break
		}
	}
	a.cache[key] = ok
	return ok
}

// unary is the interceptor that checks each unary call.
func (a *basicAuth) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if err := a.check(ctx); err != nil {
		return nil, err
	}
	return handler(ctx, req)
}
