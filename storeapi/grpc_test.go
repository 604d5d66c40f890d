package storeapi

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/thanos-io/thanos/pkg/info/infopb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// testCA issues certificates for the TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "strata test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and key for 127.0.0.1 with the given usage.
func (ca *testCA) issue(t *testing.T, serial int64, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "strata test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{usage}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTLS: with a client CA the server answers only clients presenting a
// certificate it signed; plain-text clients are refused.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca := newTestCA(t)
	sc, sk := ca.issue(t, 2, x509.ExtKeyUsageServerAuth)
	cc, ck := ca.issue(t, 3, x509.ExtKeyUsageClientAuth)
	caFile := writeFile(t, dir, "ca.pem", ca.pem)
	tlsCfg, err := ServerTLSConfig(writeFile(t, dir, "server.pem", sc), writeFile(t, dir, "server.key", sk), caFile)
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t)
	srv, _ := newServer(t, f, DefaultConfig())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := NewGRPCServer(srv, nil, tlsCfg)
	go func() { _ = g.Serve(ln) }()
	t.Cleanup(g.Stop)

	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	clientCert, err := tls.X509KeyPair(cc, ck)
	if err != nil {
		t.Fatal(err)
	}
	info := func(creds credentials.TransportCredentials) error {
		conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(creds), grpc.WithDefaultCallOptions(grpc.ForceCodec(Codec())))
		if err != nil {
			return err
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = infopb.NewInfoClient(conn).Info(ctx, &infopb.InfoRequest{})
		return err
	}
	if err := info(credentials.NewTLS(&tls.Config{RootCAs: roots, Certificates: []tls.Certificate{clientCert}, MinVersion: tls.VersionTLS12})); err != nil {
		t.Fatalf("client with a certificate signed by the CA: %v", err)
	}
	if err := info(credentials.NewTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12})); err == nil {
		t.Error("client without a certificate was answered")
	}
	if err := info(insecure.NewCredentials()); err == nil {
		t.Error("plain-text client was answered")
	}

	for _, tc := range []struct{ cert, key, ca string }{
		{"", "", caFile},
		{"server.pem", "", ""},
		{filepath.Join(dir, "missing.pem"), filepath.Join(dir, "server.key"), ""},
		{filepath.Join(dir, "server.pem"), filepath.Join(dir, "server.key"), filepath.Join(dir, "server.key")},
	} {
		if _, err := ServerTLSConfig(tc.cert, tc.key, tc.ca); err == nil {
			t.Errorf("ServerTLSConfig(%q, %q, %q): no error", tc.cert, tc.key, tc.ca)
		}
	}
}
