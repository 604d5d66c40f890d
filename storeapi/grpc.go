package storeapi

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/thanos-io/thanos/pkg/api/query/querypb"
	"github.com/thanos-io/thanos/pkg/info/infopb"
	"github.com/thanos-io/thanos/pkg/store/storepb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/encoding/proto"
)

// NewGRPCServer returns a gRPC server with s registered as the Store and
// Info services and, when qs is not nil, qs as the Query service (announced
// in Info, which makes the node a remote engine of a distributed Querier).
// tlsCfg nil serves plain text; more options (interceptors) follow Strata's
// own. The caller MUST call Stop or GracefulStop.
func NewGRPCServer(s *Server, qs *QueryServer, tlsCfg *tls.Config, more ...grpc.ServerOption) *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.ForceServerCodec(Codec()),
		grpc.MaxRecvMsgSize(16 << 20), // requests are matchers and hints: small
	}
	opts = append(opts, more...)
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	g := grpc.NewServer(opts...)
	storepb.RegisterStoreServer(g, s)
	infopb.RegisterInfoServer(g, infoServer{s: s, query: qs != nil})
	if qs != nil {
		querypb.RegisterQueryServer(g, qs)
	}
	return g
}

// infoServer is the Info service: the StoreAPI's, plus the Query API's
// announcement when it is served.
type infoServer struct {
	infopb.UnimplementedInfoServer
	s     *Server
	query bool
}

func (i infoServer) Info(ctx context.Context, req *infopb.InfoRequest) (*infopb.InfoResponse, error) {
	resp, err := i.s.Info(ctx, req)
	if err == nil && i.query {
		resp.Query = &infopb.QueryAPIInfo{}
	}
	return resp, err
}

// Codec is the wire codec of the StoreAPI's messages: they are gogoproto
// types (github.com/thanos-io/thanos' storepb and infopb), which marshal
// themselves; grpc's default codec expects google.golang.org/protobuf
// messages. Thanos registers such a codec globally; Strata hands it to its
// own server and clients instead (grpc.ForceServerCodec, grpc.ForceCodec).
func Codec() encoding.Codec { return gogoCodec{} }

type gogoMessage interface {
	Size() int
	MarshalToSizedBuffer([]byte) (int, error)
	Unmarshal([]byte) error
}

type gogoCodec struct{}

func (gogoCodec) Name() string { return proto.Name }

func (gogoCodec) Marshal(v any) ([]byte, error) {
	if w, ok := v.(wireMessage); ok {
		return w, nil // encoded by encodeSeries
	}
	m, ok := v.(gogoMessage)
	if !ok {
		return encoding.GetCodec(proto.Name).Marshal(v)
	}
	buf := make([]byte, m.Size())
	n, err := m.MarshalToSizedBuffer(buf)
	if err != nil {
		return nil, err
	}
	return buf[len(buf)-n:], nil
}

func (gogoCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(gogoMessage)
	if !ok {
		return encoding.GetCodec(proto.Name).Unmarshal(data, v)
	}
	return m.Unmarshal(data)
}

// ServerTLSConfig is the gRPC server's TLS configuration as Thanos
// components take it (--grpc-server-tls-cert, -key, -client-ca): cert and
// key enable TLS; clientCA additionally requires and verifies client
// certificates signed by it. The certificate is read again at each
// handshake, so a renewed certificate is used without a restart.
func ServerTLSConfig(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	if certFile == "" && keyFile == "" {
		if clientCAFile != "" {
			return nil, errors.New("grpc server tls: a client CA needs a server certificate and key")
		}
		return nil, nil
	}
	if certFile == "" || keyFile == "" {
		return nil, errors.New("grpc server tls: both a certificate and a key are needed")
	}
	load := func() (*tls.Certificate, error) {
		c, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("grpc server tls: load certificate: %w", err)
		}
		return &c, nil
	}
	if _, err := load(); err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return load() },
	}
	if clientCAFile != "" {
		pem, err := os.ReadFile(clientCAFile) //nolint:gosec // operator-given path
		if err != nil {
			return nil, fmt.Errorf("grpc server tls: read client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("grpc server tls: no certificate in client CA file %s", clientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
