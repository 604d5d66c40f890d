package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/prometheus/model/labels"

	"github.com/strata-dev/strata/dcgmbridge/scrape"
	"github.com/strata-dev/strata/query"
)

// startScraper scrapes the configured sources and, when self_scrape is on,
// Strata's own /metrics (as job="strata"), appending into the raw tier
// through the remote-write receiver's validation. addr is the address the
// server listens on; it becomes the self target's instance label.
func (s *server) startScraper(ctx context.Context, addr string) error {
	cfg := s.cfg.Sources
	cfg.Targets = append([]scrape.Target(nil), cfg.Targets...)
	cfg.Limits = s.write.Limits()
	selfHost := ""
	if s.cfg.SelfScrape.Enabled {
		selfHost = addr
		cfg.Targets = append(cfg.Targets, scrape.Target{
			Name:     "strata",
			URL:      "http://" + addr + "/metrics",
			Kind:     scrape.KindGeneric,
			Interval: time.Duration(s.cfg.SelfScrape.Interval),
		})
	}
	if len(cfg.Targets) == 0 {
		return nil
	}
	client := &http.Client{Transport: &inProcessTransport{host: selfHost, handler: s.metricsHandler(), next: http.DefaultTransport}}
	opts := []scrape.Option{scrape.WithHTTPClient(client), scrape.WithMetadata(s.meta)}
	if s.disk != nil {
		opts = append(opts, scrape.WithStorageGate(s.disk.Err))
	}
	scr, err := scrape.New(cfg, s.rawApp, s.logger.With("component", "scrape"), s.reg, time.Now, opts...)
	if err != nil {
		return err
	}
	s.closer = append(s.closer, scr.Close)
	s.targets.scraper.Store(scr)
	go func() {
		if err := scr.Run(ctx); err != nil {
			s.logger.Error("scraper stopped", "err", err)
		}
	}()
	return nil
}

// inProcessTransport answers requests for host from handler without a network
// round trip (so self-scraping works whatever TLS and basic auth the listener
// enforces) and sends every other request to next.
type inProcessTransport struct {
	host    string
	handler http.Handler
	next    http.RoundTripper
}

func (t *inProcessTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if t.host == "" || req.URL.Host != t.host {
		return t.next.RoundTrip(req)
	}
	w := &bufferedResponse{header: http.Header{}, code: http.StatusOK}
	t.handler.ServeHTTP(w, req)
	return &http.Response{
		StatusCode:    w.code,
		Status:        http.StatusText(w.code),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        w.header,
		Body:          io.NopCloser(&w.body),
		ContentLength: int64(w.body.Len()),
		Request:       req,
	}, nil
}

// bufferedResponse is the http.ResponseWriter of an in-process request.
type bufferedResponse struct {
	header http.Header
	body   bytes.Buffer
	code   int
	wrote  bool
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) WriteHeader(code int) {
	if !b.wrote {
		b.code, b.wrote = code, true
	}
}

func (b *bufferedResponse) Write(p []byte) (int, error) {
	b.wrote = true
	return b.body.Write(p)
}

// scrapeTargets is the scraper's view of its targets for /api/v1/targets
// (query.TargetSource). The scraper starts once the listener is up, after
// the API is built; until then, and when nothing is scraped, there are no
// targets.
type scrapeTargets struct {
	scraper atomic.Pointer[scrape.Scraper]
}

func (t *scrapeTargets) ActiveTargets() []query.ActiveTarget {
	scr := t.scraper.Load()
	if scr == nil {
		return nil
	}
	st := scr.Targets()
	out := make([]query.ActiveTarget, len(st))
	for i, x := range st {
		out[i] = query.ActiveTarget{
			Pool: x.Target.Name, URL: x.Target.URL,
			Labels: x.Labels, Discovered: labels.FromMap(x.Target.Labels),
			Interval: x.Target.Interval, Timeout: x.Target.Timeout,
			LastScrape: x.LastScrape, LastScrapeDuration: x.LastScrapeDuration, LastError: x.LastError,
		}
	}
	return out
}

// externalHost is where clients reach Strata, as Prometheus defaults its
// --web.external-url: this host's name and the listen port. /api/v1/targets
// names it in the globalUrl of targets on localhost.
func externalHost(listen string) string {
	_, port, err := net.SplitHostPort(listen)
	if err != nil {
		return listen
	}
	host, err := os.Hostname()
	if err != nil {
		host = "localhost"
	}
	return net.JoinHostPort(host, port)
}
