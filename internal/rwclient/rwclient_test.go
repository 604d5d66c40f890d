package rwclient

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// script answers the n-th request with replies[n] (2xx after the last), with
// the given Retry-After.
type script struct {
	mu         sync.Mutex
	replies    []int
	retryAfter string
	n          int
	headers    http.Header
}

func (s *script) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.headers = r.Header.Clone()
	code := http.StatusOK
	if s.n < len(s.replies) {
		code = s.replies[s.n]
	}
	s.n++
	if s.retryAfter != "" {
		w.Header().Set("Retry-After", s.retryAfter)
	}
	if code/100 != 2 {
		http.Error(w, "reply "+strconv.Itoa(code), code)
		return
	}
	w.WriteHeader(code)
	_, _ = w.Write([]byte("accepted"))
}

// recordSleep replaces waiting: it records the waits and returns at once.
type recordSleep struct{ waits []time.Duration }

func (r *recordSleep) sleep(ctx context.Context, d time.Duration) error {
	r.waits = append(r.waits, d)
	return ctx.Err()
}

func newClient(t *testing.T, srv *httptest.Server, mod func(*Config)) (*Client, *recordSleep) {
	t.Helper()
	rs := &recordSleep{}
	cfg := Config{URL: srv.URL, ContentType: "application/x-protobuf", Version: "0.1.0", UserAgent: "test", Sleep: rs.sleep}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, rs
}

func TestSendRetries(t *testing.T) {
	for _, tc := range []struct {
		name       string
		replies    []int
		retryAfter string
		maxRetries int
		wantErr    error
		wantWaits  []time.Duration
	}{
		{name: "accepted at once", wantWaits: nil},
		{name: "5xx and 429 retried, backoff doubling", replies: []int{503, 429, 500},
			wantWaits: []time.Duration{30 * time.Millisecond, 60 * time.Millisecond, 120 * time.Millisecond}},
		{name: "Retry-After honoured, beyond the max backoff too", replies: []int{429, 503}, retryAfter: "7",
			wantWaits: []time.Duration{7 * time.Second, 7 * time.Second}},
		{name: "backoff capped at the max", replies: []int{500, 500, 500, 500, 500, 500, 500, 500, 500},
			wantWaits: []time.Duration{30, 60, 120, 240, 480, 960, 1920, 3840, 5000}},
		{name: "4xx refused, never retried", replies: []int{400}, wantErr: ErrRejected},
		{name: "413 refused too", replies: []int{413}, wantErr: ErrRejected},
		{name: "retries bounded", replies: []int{500, 500, 500}, maxRetries: 2, wantErr: ErrRetriesExhausted,
			wantWaits: []time.Duration{30 * time.Millisecond, 60 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := &script{replies: tc.replies, retryAfter: tc.retryAfter}
			srv := httptest.NewServer(s)
			defer srv.Close()
			c, rs := newClient(t, srv, func(c *Config) { c.MaxRetries = tc.maxRetries })
			var attempts []Attempt
			last, err := c.Send(context.Background(), []byte("body"), func(a Attempt) { attempts = append(attempts, a) })
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("error %v, want %v", err, tc.wantErr)
			}
			want := tc.wantWaits
			if tc.name == "backoff capped at the max" {
				for i := range want {
					want[i] *= time.Millisecond
				}
			}
			if len(rs.waits) != len(want) {
				t.Fatalf("waits %v, want %v", rs.waits, want)
			}
			for i := range want {
				if rs.waits[i] != want[i] {
					t.Fatalf("waits %v, want %v", rs.waits, want)
				}
			}
			retries := 0
			for _, a := range attempts {
				if a.Retry {
					retries++
				}
			}
			if len(attempts) != s.n || retries != len(want) || last.Status != attempts[len(attempts)-1].Status {
				t.Errorf("%d attempts observed, %d sent; %d retries, want %d", len(attempts), s.n, retries, len(want))
			}
		})
	}
}

func TestSendHeaders(t *testing.T) {
	s := &script{}
	srv := httptest.NewServer(s)
	defer srv.Close()
	c, _ := newClient(t, srv, func(c *Config) { c.Username, c.Password = "u", "p" })
	if _, err := c.Send(context.Background(), []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	h := s.headers
	if h.Get("Content-Encoding") != "snappy" || h.Get("Content-Type") != "application/x-protobuf" ||
		h.Get("X-Prometheus-Remote-Write-Version") != "0.1.0" || h.Get("User-Agent") != "test" || h.Get("Authorization") == "" {
		t.Errorf("headers %v", h)
	}

	// OTLP: gzip, no remote-write version, the reply's body kept.
	c, _ = newClient(t, srv, func(c *Config) { c.ContentEncoding, c.Version, c.KeepBody = "gzip", "", true })
	a, err := c.Send(context.Background(), []byte("x"), nil)
	if err != nil {
		t.Fatal(err)
	}
	h = s.headers
	if h.Get("Content-Encoding") != "gzip" || h.Values("X-Prometheus-Remote-Write-Version") != nil || string(a.Body) != "accepted" {
		t.Errorf("OTLP: headers %v, body %q", h, a.Body)
	}
}

func TestSendBounds(t *testing.T) {
	s := &script{replies: []int{503, 503, 503, 503}}
	srv := httptest.NewServer(s)
	defer srv.Close()
	budget := 2
	c, _ := newClient(t, srv, func(c *Config) { c.Admit = func() bool { budget--; return budget >= 0 } })
	if _, err := c.Send(context.Background(), []byte("x"), nil); !errors.Is(err, ErrNotAdmitted) || s.n != 2 {
		t.Fatalf("error %v after %d requests, want ErrNotAdmitted after 2", err, s.n)
	}
	// A context that ends stops the retries.
	ctx, cancel := context.WithCancel(context.Background())
	c, _ = newClient(t, srv, func(c *Config) {
		c.Sleep = func(context.Context, time.Duration) error { cancel(); return context.Canceled }
	})
	if _, err := c.Send(ctx, []byte("x"), nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("error %v, want context.Canceled", err)
	}
	for _, cfg := range []Config{{}, {URL: "ftp://x/"}, {URL: "http://127.0.0.1:1", MinBackoff: time.Second, MaxBackoff: time.Millisecond}, {URL: "http://127.0.0.1:1", MaxRetries: -1}, {URL: "http://127.0.0.1:1", ContentEncoding: "br"}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		in   string
		want time.Duration
	}{
		{"", 0}, {"3", 3 * time.Second}, {"junk", 0},
		{now.Add(7 * time.Second).Format(http.TimeFormat), 7 * time.Second},
	} {
		if got := RetryAfter(tc.in, now); got != tc.want {
			t.Errorf("RetryAfter(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
}
