package main

import (
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/strata-dev/strata/storeapi"
)

func addGRPCFlags(o *overrides) {
	o.string("grpc.listen-address", "Address of the Thanos StoreAPI (gRPC) for a Thanos Querier; empty: off. (default: off)",
		func(c *Config) *string { return &c.GRPC.ListenAddress })
	o.string("grpc-server-tls-cert", "TLS certificate of the gRPC server; with --grpc-server-tls-key, enables TLS.",
		func(c *Config) *string { return &c.GRPC.TLSCert })
	o.string("grpc-server-tls-key", "TLS key of the gRPC server.",
		func(c *Config) *string { return &c.GRPC.TLSKey })
	o.string("grpc-server-tls-client-ca", "CA that signs the client certificates the gRPC server requires; empty: no client certificates.",
		func(c *Config) *string { return &c.GRPC.TLSClientCA })
	o.bool("grpc.query-api", "Also serve Thanos' Query API on the gRPC address, for a Thanos Querier in distributed mode (--query.mode=distributed); --no-grpc.query-api: StoreAPI only. (default: on)",
		func(c *Config) *bool { return &c.GRPC.QueryAPI })
	o.int("store.grpc.series-max-concurrency", "StoreAPI requests served at once; others wait until their deadline. (default: 20)",
		func(c *Config) *int { return &c.GRPC.MaxConcurrency })
	o.int("store.limits.request-series", "Most series one StoreAPI Series request may select; 0: no bound. (default: 1000000)",
		func(c *Config) *int { return &c.GRPC.MaxSeries })
	o.string("remote-write.otlp-grpc-listen-address", "Address of the OTLP receiver's gRPC endpoint (OTLP/gRPC, conventionally :4317), with the gRPC TLS flags' certificates; empty: off. (default: off)",
		func(c *Config) *string { return &c.RemoteWrite.OTLPGRPCListenAddress })
	o.int("store.limits.request-samples", "Most samples one StoreAPI Series request may send; 0: no bound. (default: 100000000)",
		func(c *Config) *int { return &c.GRPC.MaxSamples })
}

// serveGRPC starts the gRPC servers that are configured: the StoreAPI (and
// the Query API), and the OTLP receiver's gRPC endpoint; a serving error is
// sent on errc. The returned function stops them, letting requests in
// flight finish for at most 30 s.
func (s *server) serveGRPC(errc chan<- error) (stop func(), err error) {
	var stops []func()
	stopAll := func() {
		for _, f := range stops {
			f()
		}
	}
	if s.store == nil && s.cfg.RemoteWrite.OTLPGRPCListenAddress == "" {
		return stopAll, nil
	}
	tlsCfg, err := storeapi.ServerTLSConfig(s.cfg.GRPC.TLSCert, s.cfg.GRPC.TLSKey, s.cfg.GRPC.TLSClientCA)
	if err != nil {
		return nil, err
	}
	start := func(name, addr string, g *grpc.Server) (net.Addr, error) {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("listen on %s (%s): %w", addr, name, err)
		}
		go func() {
			if err := g.Serve(ln); err != nil {
				errc <- fmt.Errorf("%s server: %w", name, err)
			}
		}()
		stops = append(stops, func() { gracefulStop(g) })
		return ln.Addr(), nil
	}
	if s.store != nil {
		addr, err := start("grpc", s.cfg.GRPC.ListenAddress, storeapi.NewGRPCServer(s.store, s.queryAPI, tlsCfg,
			grpc.ChainStreamInterceptor(s.streamReadsData)))
		if err != nil {
			return nil, err
		}
		if s.queryAPI != nil {
			stops = append(stops, s.queryAPI.Close) // the selections it holds for later requests
		}
		s.logger.Info("StoreAPI started", "address", addr.String(), "tls", tlsCfg != nil, "query_api", s.queryAPI != nil, "external_labels", s.cfg.Global.ExternalLabels)
	}
	if listen := s.cfg.RemoteWrite.OTLPGRPCListenAddress; listen != "" {
		// gRPC decodes a message before the receiver admits it: bound it
		// as a decompressed body is bounded.
		opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(int(s.cfg.RemoteWrite.MaxDecompressedBytes))}
		if tlsCfg != nil {
			opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
		}
		if f := s.cfg.Web.ConfigFile; f != "" {
			// The web configuration's basic auth, which the OTLP/HTTP
			// receiver is behind too. Not on the StoreAPI: a Thanos
			// Querier sends none (it authenticates with a client
			// certificate).
			opts = append(opts, grpc.UnaryInterceptor(newBasicAuth(f).unary))
		}
		g := grpc.NewServer(opts...)
		s.otlp.RegisterGRPC(g)
		addr, err := start("otlp grpc", listen, g)
		if err != nil {
			stopAll()
			return nil, err
		}
		s.logger.Info("OTLP gRPC receiver started", "address", addr.String(), "tls", tlsCfg != nil)
	}
	return stopAll, nil
}

// gracefulStop stops g, letting requests in flight finish for at most 30 s.
func gracefulStop(g *grpc.Server) {
	done := make(chan struct{})
	go func() { g.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		g.Stop()
	}
}

// streamReadsData marks the server as queried (queriedRecently) when a
// streamed StoreAPI or Query API call starts and when it ends: Series,
// Query and QueryRange, the calls that read series data; Info, LabelNames
// and LabelValues are unary.
func (s *server) streamReadsData(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	s.markQueried()
	defer s.markQueried()
	return h(srv, ss)
}
