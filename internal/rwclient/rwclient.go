package rwclient

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Errors of Send; the one returned wraps the reason (errors.Is).
var (
	// ErrRejected is a 4xx other than 429: the receiver will never accept
	// the body, so it is dropped and not retried.
	ErrRejected = errors.New("remote write rejected")
	// ErrNotAdmitted is returned when Config.Admit refused an attempt.
	ErrNotAdmitted = errors.New("remote write not admitted")
	// ErrRetriesExhausted is returned after Config.MaxRetries retries.
	ErrRetriesExhausted = errors.New("remote write retries exhausted")
)

// Defaults of Config, those of Prometheus' queue manager.
const (
	DefaultMinBackoff = 30 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
)

// Config configures a Client. Zero values take the documented defaults.
type Config struct {
	URL string
	// ContentType and Version are the Content-Type and
	// X-Prometheus-Remote-Write-Version headers of every request: for RW 1.0
	// "application/x-protobuf" and "0.1.0"; no version header when Version
	// is empty (OTLP). ContentEncoding is the bodies' compression: "snappy"
	// (the default, remote write's) or "gzip" (OTLP's).
	ContentType     string
	Version         string
	ContentEncoding string
	UserAgent       string
	// Username and Password, when Username is set, are sent as basic auth.
	Username, Password string
	// HTTPClient sends the requests (default: a client with a 30 s timeout).
	HTTPClient *http.Client
	// MinBackoff and MaxBackoff bound the wait before a retry: it starts at
	// MinBackoff and doubles up to MaxBackoff, or is the reply's Retry-After
	// when it sends one (defaults 30ms and 5s).
	MinBackoff, MaxBackoff time.Duration
	// MaxRetries bounds the retries of one Send; 0 retries until ctx ends
	// (or Admit refuses).
	MaxRetries int
	// Admit, when set, is asked before every attempt; false ends Send with
	// ErrNotAdmitted. It is how a caller enforces a request budget.
	Admit func() bool
	// Sleep waits for d or until ctx ends (default: a timer). Tests replace
	// it so that backoff does not wait.
	Sleep func(ctx context.Context, d time.Duration) error
	// Now is the clock an HTTP-date Retry-After is read against (default
	// time.Now).
	Now func() time.Time
	// KeepBody keeps a 2xx reply's body in Attempt.Body (an OTLP reply's
	// partial success).
	KeepBody bool
}

// Attempt is one HTTP request of a Send.
type Attempt struct {
	// Status is the reply's status code, 0 when the request got no reply.
	Status int
	Header http.Header
	// Message is the start and end of an error reply's body (receivers name
	// the series first and the reason last).
	Message string
	// Body is a 2xx reply's body, when Config.KeepBody asks for it (at most
	// 64 KiB).
	Body []byte
	// Err is why the request got no reply (transport error, ctx ended).
	Err     error
	Latency time.Duration
	// Retry says that Send retries after this attempt.
	Retry bool
}

// Client sends remote-write bodies with Prometheus' retry rules: 429, 5xx and
// transport errors are retried after a backoff (honouring Retry-After),
// other 4xx replies are refusals and never retried. It is safe for
// concurrent use.
type Client struct {
	cfg Config
}

// New checks cfg and fills its defaults.
func New(cfg Config) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("remote write URL %q: want http(s)://host/path", cfg.URL)
	}
	if cfg.MinBackoff <= 0 {
		cfg.MinBackoff = DefaultMinBackoff
	}
	if cfg.MaxBackoff <= 0 {
		cfg.MaxBackoff = DefaultMaxBackoff
	}
	if cfg.MaxBackoff < cfg.MinBackoff {
		return nil, fmt.Errorf("remote write max backoff %s is under the min backoff %s", cfg.MaxBackoff, cfg.MinBackoff)
	}
	if cfg.MaxRetries < 0 {
		return nil, fmt.Errorf("remote write max retries %d is negative", cfg.MaxRetries)
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	if cfg.Sleep == nil {
		cfg.Sleep = Sleep
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	switch cfg.ContentEncoding {
	case "":
		cfg.ContentEncoding = "snappy"
	case "snappy", "gzip":
	default:
		return nil, fmt.Errorf("remote write content encoding %q: want snappy or gzip", cfg.ContentEncoding)
	}
	return &Client{cfg: cfg}, nil
}

// Send posts body (protobuf compressed as Config.ContentEncoding says) until the receiver accepts
// it, refuses it, or a bound ends the retries: ctx, Config.Admit or
// Config.MaxRetries. observe, when not nil, is called after every attempt,
// before Send waits to retry. Send returns the last attempt and nil for a
// 2xx, an error wrapping ErrRejected for a refusal, ErrNotAdmitted,
// ErrRetriesExhausted or ctx's error otherwise.
func (c *Client) Send(ctx context.Context, body []byte, observe func(Attempt)) (Attempt, error) {
	backoff := c.cfg.MinBackoff
	var last Attempt
	for n := 0; ; n++ {
		if err := ctx.Err(); err != nil {
			return last, err
		}
		if c.cfg.Admit != nil && !c.cfg.Admit() {
			return last, ErrNotAdmitted
		}
		a := c.post(ctx, body)
		last = a
		retryable := a.Err != nil || a.Status == http.StatusTooManyRequests || a.Status/100 == 5
		switch {
		case a.Err == nil && a.Status/100 == 2:
		case !retryable:
			// Any other status, 1xx and 3xx included, will not change.
		case ctx.Err() != nil:
		default:
			a.Retry = c.cfg.MaxRetries == 0 || n < c.cfg.MaxRetries
		}
		if observe != nil {
			observe(a)
		}
		switch {
		case a.Err == nil && a.Status/100 == 2:
			return a, nil
		case !retryable:
			return a, fmt.Errorf("%w: HTTP %d: %s", ErrRejected, a.Status, a.Message)
		case ctx.Err() != nil:
			return a, ctx.Err()
		case !a.Retry:
			return a, fmt.Errorf("%w after %d attempts: %w", ErrRetriesExhausted, n+1, a.failure())
		}
		wait := backoff
		if ra := RetryAfter(a.Header.Get("Retry-After"), c.cfg.Now()); ra > 0 {
			wait = ra
		}
		if err := c.cfg.Sleep(ctx, wait); err != nil {
			return a, err
		}
		backoff = min(wait*2, c.cfg.MaxBackoff)
	}
}

// failure describes a retryable attempt.
func (a Attempt) failure() error {
	if a.Err != nil {
		return a.Err
	}
	return fmt.Errorf("HTTP %d: %s", a.Status, a.Message)
}

// post sends one request. The reply body is drained (up to 64 KiB) so the
// connection is reused.
func (c *Client) post(ctx context.Context, body []byte) Attempt {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return Attempt{Err: fmt.Errorf("build request: %w", err)}
	}
	req.Header.Set("Content-Encoding", c.cfg.ContentEncoding)
	req.Header.Set("Content-Type", c.cfg.ContentType)
	if c.cfg.Version != "" {
		req.Header.Set("X-Prometheus-Remote-Write-Version", c.cfg.Version)
	}
	if c.cfg.UserAgent != "" {
		req.Header.Set("User-Agent", c.cfg.UserAgent)
	}
	if c.cfg.Username != "" {
		req.SetBasicAuth(c.cfg.Username, c.cfg.Password)
	}
	began := time.Now()
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return Attempt{Err: fmt.Errorf("post %s: %w", c.cfg.URL, err), Latency: time.Since(began)}
	}
	a := Attempt{Status: resp.StatusCode, Header: resp.Header}
	if resp.StatusCode/100 != 2 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if len(msg) > 400 {
			msg = append(append(msg[:150:150], " ... "...), msg[len(msg)-250:]...)
		}
		a.Message = string(bytes.TrimSpace(msg))
	} else if c.cfg.KeepBody {
		a.Body, _ = io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	a.Latency = time.Since(began)
	if err := resp.Body.Close(); err != nil {
		return Attempt{Err: fmt.Errorf("close reply body: %w", err), Latency: a.Latency}
	}
	return a
}

// RetryAfter parses a Retry-After value (seconds or an HTTP date), as
// Prometheus' remote-write client does; zero or less means "use the backoff".
func RetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil {
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return t.Sub(now)
	}
	return 0
}

// Sleep waits for d or until ctx ends, whichever is first, and returns ctx's
// error if it ended: the default Config.Sleep, and the pacing of senders
// between requests.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
