package main

import (
	"fmt"
	"net"
	"time"

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
	o.int("store.limits.request-samples", "Most samples one StoreAPI Series request may send; 0: no bound. (default: 100000000)",
		func(c *Config) *int { return &c.GRPC.MaxSamples })
}

// serveGRPC starts the StoreAPI (and the Query API) when it is configured; a serving error is
// sent on errc. The returned function stops it, letting requests in flight
// finish for at most 30 s.
func (s *server) serveGRPC(errc chan<- error) (stop func(), err error) {
	if s.store == nil {
		return func() {}, nil
	}
	tlsCfg, err := storeapi.ServerTLSConfig(s.cfg.GRPC.TLSCert, s.cfg.GRPC.TLSKey, s.cfg.GRPC.TLSClientCA)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", s.cfg.GRPC.ListenAddress)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (grpc): %w", s.cfg.GRPC.ListenAddress, err)
	}
	g := storeapi.NewGRPCServer(s.store, s.queryAPI, tlsCfg)
	go func() {
		if err := g.Serve(ln); err != nil {
			errc <- fmt.Errorf("grpc server: %w", err)
		}
	}()
	s.logger.Info("StoreAPI started", "address", ln.Addr().String(), "tls", tlsCfg != nil, "query_api", s.queryAPI != nil, "external_labels", s.cfg.Global.ExternalLabels)
	return func() {
		done := make(chan struct{})
		go func() { g.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			g.Stop()
		}
		if s.queryAPI != nil {
			s.queryAPI.Close() // the selections it holds for later requests
		}
	}, nil
}
