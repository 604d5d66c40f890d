package rulegen

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"

	"github.com/strata-dev/strata/dcgmbridge/scrape"
)

// TestNetworkLatencyFromEBPF checks the eBPF network-latency series: exp2
// ebpf_exporter buckets (summed per host), and bpftrace_exporter's sparse
// buckets added by configuration (quantile per series, worst kept).
func TestNetworkLatencyFromEBPF(t *testing.T) {
	e := newEvalEnv(t)
	host := []string{"job", "ebpf", "instance", "gpu-node-a17:9435"}
	// The only real ebpf_exporter exposition is biolatency; accept-latency has
	// the same exp2 shape (µs edges in seconds), so rename it.
	bio := e.parseFixture("ebpf_exporter/bio_latency_exposition.prom", host)
	accept := make([]scrape.Sample, len(bio))
	for i, s := range bio {
		b := labels.NewBuilder(s.Labels)
		b.Set("__name__", strings.Replace(s.Labels.Get("__name__"), "bio_latency", "accept_latency", 1))
		accept[i] = scrape.Sample{Labels: b.Labels(), Value: s.Value}
	}
	e.scrapeSequence(accept, grown(accept, 2))
	hist := e.parseFixture("bpftrace_exporter/histmap.metrics", []string{"job", "bpftrace", "instance", "gpu-node-a17:9101"})
	e.scrapeSequence(hist, grown(hist, 2))

	cfg := DefaultConfig()
	cfg.RateWindow = time.Minute
	cfg.NetworkHistograms = []HistogramSource{{Name: "bpftrace_histmap_h", Scale: 1e6, Sparse: true}}
	e.evalRules(cfg, t1)

	// Oracle for the ebpf series: histogram_quantile over the same buckets.
	want := e.one(`histogram_quantile(0.99, sum by (le) (rate(ebpf_exporter_accept_latency_seconds_bucket[1m])))`, t1)
	near(t, "ebpf p99", e.one(`strata:network_latency_seconds:p99{job="ebpf"}`, t1), want, 1e-12)
	if want <= 0 || want > 134.217728 {
		t.Errorf("ebpf p99 %g outside the exp2 range", want)
	}
	// bpftrace: key 0 has le 3,7,15 (counts 2,2,3): p99 in (7,15] is
	// 7 + 8*(2.97-2)/1 = 14.76; key 1 has only le 31 (count 2): 31*1.98/2 =
	// 30.69. Summing the two keys' buckets would mix le sets; the worst key wins.
	near(t, "bpftrace p99", e.one(`strata:network_latency_seconds:p99{job="bpftrace"}`, t1), 30.69e-6, 1e-9)
}

// TestQuantileFromNativeHistograms checks that a sender converting classic
// histograms to native ones (NHCB) yields the same canonical quantiles.
func TestQuantileFromNativeHistograms(t *testing.T) {
	classic, native := newEvalEnv(t), newEvalEnv(t)
	for _, step := range []struct {
		fixture string
		ts      time.Time
	}{{"vllm_v1_t0_healthy.prom", t0}, {"vllm_v1_t1_kv_storm.prom", t1}} {
		s := classic.parseFixture(step.fixture, v1Pod)
		app := classic.raw.Appender(context.Background())
		for _, smp := range s {
			if _, err := app.Append(0, smp.Labels, step.ts.UnixMilli(), smp.Value); err != nil {
				t.Fatal(err)
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
		appendNHCB(t, native, step.fixture, step.ts)
	}
	cfg := DefaultConfig()
	classic.evalRules(cfg, t1)
	native.evalRules(cfg, t1)
	for _, name := range []string{"strata:ttft_seconds:p99", "strata:queue_time_seconds:p99", "strata:e2e_latency_seconds:p99"} {
		t.Run(name, func(t *testing.T) {
			c := classic.one(name, t1)
			n := native.one(name, t1)
			near(t, name, n, c, 0.05*c)
		})
	}
}

// appendNHCB parses a fixture with Prometheus' classic-to-NHCB conversion and
// appends the native histograms only.
func appendNHCB(t *testing.T, e *evalEnv, fixture string, ts time.Time) {
	t.Helper()
	body := readFixture(t, fixture)
	p, err := textparse.New(body, "text/plain", labels.NewSymbolTable(), textparse.ParserOptions{ConvertClassicHistogramsToNHCB: true})
	if err != nil {
		t.Fatal(err)
	}
	target := labels.FromStrings(v1Pod...)
	app := e.raw.Appender(context.Background())
	var lset labels.Labels
	n := 0
	for {
		entry, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if entry != textparse.EntryHistogram {
			continue
		}
		_, _, h, fh := p.Histogram()
		p.Labels(&lset)
		b := labels.NewBuilder(lset)
		target.Range(func(l labels.Label) { b.Set(l.Name, l.Value) })
		var hc *histogram.Histogram
		if h != nil {
			hc = h.Copy()
		}
		var fhc *histogram.FloatHistogram
		if fh != nil {
			fhc = fh.Copy()
		}
		if _, err := app.AppendHistogram(0, b.Labels(), ts.UnixMilli(), hc, fhc); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if err := app.Commit(); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no native histograms")
	}
}
