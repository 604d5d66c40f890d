package sim

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
)

// Target describes one simulated endpoint, for writing a Prometheus scrape
// configuration (static_configs or file_sd) for Serve.
type Target struct {
	Job      string `json:"job"`
	Instance string `json:"instance"` // host:port label the series carry
	Path     string `json:"path"`     // URL path under Serve's address
}

// Targets lists the simulated endpoints in a stable order: per node the
// dcgm-exporter, its vLLM instances and the ebpf_exporter.
func (c *Cluster) Targets() []Target {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Target, 0, len(c.targets))
	for _, t := range c.targets {
		out = append(out, Target{Job: t.job, Instance: t.addr, Path: t.path})
	}
	return out
}

// errTargetDown is returned for an endpoint that is down or in a scrape gap.
var errTargetDown = errors.New("target down")

// WriteExposition writes the text exposition of the endpoint at path as it is
// at the current model time. It does not step the model.
func (c *Cluster) WriteExposition(w io.Writer, path string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.refresh()
	for _, t := range c.targets {
		if t.path != path {
			continue
		}
		if !t.live() {
			return fmt.Errorf("%s: %w", path, errTargetDown)
		}
		var buf bytes.Buffer
		renderTarget(&buf, t)
		_, err := w.Write(buf.Bytes())
		return err
	}
	return fmt.Errorf("unknown target path %q", path)
}

func renderTarget(buf *bytes.Buffer, t *target) {
	var vals []float64
	var num []byte
	for i := range t.families {
		f := &t.families[i]
		vals = fillFamily(f, vals)
		buf.WriteString("# HELP ")
		buf.WriteString(f.name)
		buf.WriteByte(' ')
		buf.WriteString(f.help)
		buf.WriteString("\n# TYPE ")
		buf.WriteString(f.name)
		buf.WriteByte(' ')
		buf.WriteString(f.typ)
		buf.WriteByte('\n')
		for j := range f.series {
			s := &f.series[j]
			buf.WriteString(s.text)
			buf.WriteByte(' ')
			num = appendValue(num[:0], s.vf, vals[j])
			buf.Write(num)
			buf.WriteByte('\n')
		}
	}
}

func fillFamily(f *family, vals []float64) []float64 {
	if cap(vals) < len(f.series) {
		vals = make([]float64, len(f.series))
	}
	vals = vals[:len(f.series)]
	f.fill(vals)
	return vals
}

// Handlers returns one http.Handler per simulated endpoint, keyed by path.
// Each scrape first steps the model to now() (the caller's clock; the model
// itself never reads one), then renders. A target that is down or in a
// scrape-gap decoy answers 503.
func (c *Cluster) Handlers(now func() time.Time) map[string]http.Handler {
	out := map[string]http.Handler{}
	for _, t := range c.Targets() {
		path := t.Path
		out[path] = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if now != nil {
				c.Step(now())
			}
			var buf bytes.Buffer
			if err := c.WriteExposition(&buf, path); err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
			_, _ = w.Write(buf.Bytes())
		})
	}
	return out
}

// Serve serves every endpoint (see Handlers) plus /targets (JSON list for
// file_sd-style use) on addr until ctx ends. now drives the model; pass
// time.Now for a live demo (with Config.Start set near now: the first scrape
// simulates every tick from Start), or a scaled clock to fast-forward.
func (c *Cluster) Serve(ctx context.Context, addr string, now func() time.Time) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("sim serve: %w", err)
	}
	return c.ServeListener(ctx, ln, now)
}

// ServeListener is Serve on a listener the caller opened, for a caller that
// needs the address or must know the endpoints answer before it scrapes. It
// closes ln when it returns.
func (c *Cluster) ServeListener(ctx context.Context, ln net.Listener, now func() time.Time) error {
	mux := http.NewServeMux()
	for p, h := range c.Handlers(now) {
		mux.Handle(p, h)
	}
	targets := c.Targets()
	mux.HandleFunc("/targets", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		var sb strings.Builder
		sb.WriteString("[")
		for i, t := range targets {
			if i > 0 {
				sb.WriteString(",")
			}
			fmt.Fprintf(&sb, `{"job":%q,"instance":%q,"path":%q}`, t.Job, t.Instance, t.Path)
		}
		sb.WriteString("]\n")
		_, _ = io.WriteString(w, sb.String())
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			return fmt.Errorf("sim serve shutdown: %w", err)
		}
		return nil
	case err := <-errc:
		return fmt.Errorf("sim serve: %w", err)
	}
}

// emitter walks the live series at one timestamp and, like a Prometheus
// scrape loop, writes stale markers for series that went away since its last
// call: a target that stopped answering (instance down, scrape gap) or a
// label set replaced by a rebuild (a deploy renamed the pod).
type emitter struct {
	last map[*target][]family // what was emitted last time, per target
	vals []float64
}

func newEmitter() *emitter { return &emitter{last: map[*target][]family{}} }

func (e *emitter) emit(c *Cluster, ts int64, fn func(s *series, t int64, v float64) error) error {
	stale := math.Float64frombits(value.StaleNaN)
	for _, t := range c.targets {
		prev, had := e.last[t]
		live := t.live()
		if had && (!live || !sameFamilies(prev, t.families)) {
			keep := map[string]bool{}
			if live {
				for i := range t.families {
					for j := range t.families[i].series {
						keep[t.families[i].series[j].lset.String()] = true
					}
				}
			}
			for i := range prev {
				for j := range prev[i].series {
					if s := &prev[i].series[j]; !keep[s.lset.String()] {
						if err := fn(s, ts, stale); err != nil {
							return err
						}
					}
				}
			}
			delete(e.last, t)
		}
		if !live {
			continue
		}
		e.last[t] = t.families
		for i := range t.families {
			f := &t.families[i]
			e.vals = fillFamily(f, e.vals)
			for j := range f.series {
				if err := fn(&f.series[j], ts, e.vals[j]); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// sameFamilies reports whether b is the very slice a (not rebuilt).
func sameFamilies(a, b []family) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// Backfill steps the model from its current time through [from, to] and
// calls emit for every series of every live endpoint at from, from+step, ...
// up to and including to: samples come in time order, all series of one
// timestamp together. When an endpoint stops answering or its label sets
// change, its old series get one stale marker (value.StaleNaN), as a
// Prometheus scrape loop writes them. Series carry job and instance labels (and namespace
// and pod for vLLM) as a Prometheus scrape would add them. The model ticks at
// Config.Tick whatever step is, so coarse steps give the same values a scrape
// at those times would. emit's error stops the backfill and is returned.
func (c *Cluster) Backfill(from, to time.Time, step time.Duration, emit func(series labels.Labels, t int64, v float64) error) error {
	if step <= 0 {
		return fmt.Errorf("backfill step %s must be positive", step)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if from.Before(c.now()) {
		return fmt.Errorf("backfill from %s is before the model time %s", from.Format(time.RFC3339), c.now().Format(time.RFC3339))
	}
	e := newEmitter()
	fn := func(s *series, t int64, v float64) error { return emit(s.lset, t, v) }
	for t := from; !t.After(to); t = t.Add(step) {
		c.stepTo(t)
		c.refresh()
		if err := e.emit(c, t.UnixMilli(), fn); err != nil {
			return fmt.Errorf("backfill at %s: %w", t.Format(time.RFC3339), err)
		}
	}
	return nil
}

// Sample is one backfilled sample.
type Sample struct {
	T int64 // ms since the epoch
	V float64
}

// Samples is Backfill as an iterator; stopping the loop stops the model.
func (c *Cluster) Samples(from, to time.Time, step time.Duration) iter.Seq2[labels.Labels, Sample] {
	errStop := errors.New("stop")
	return func(yield func(labels.Labels, Sample) bool) {
		_ = c.Backfill(from, to, step, func(l labels.Labels, t int64, v float64) error {
			if !yield(l, Sample{T: t, V: v}) {
				return errStop
			}
			return nil
		})
	}
}

// WriteOpenMetrics writes [from, to] at step as OpenMetrics text with
// timestamps, the input of `promtool tsdb create-blocks-from openmetrics`.
// Each series carries the labels a scrape or a push stores (the target's
// job and instance too, which an exposition leaves to the scraper): the
// same series on two targets (a per-node metric on every node) would
// otherwise be one series with several samples at every timestamp.
// Samples are grouped per series in blocks of chunk timestamps (a family
// reappears once per block, which promtool accepts); counters whose name
// lacks the _total suffix required by OpenMetrics (several DCGM fields) are
// typed unknown so that their names are kept unchanged.
func (c *Cluster) WriteOpenMetrics(w io.Writer, from, to time.Time, step time.Duration) error {
	const chunk = 120
	type point struct {
		ts   int64
		vals []float64 // nil when the target was not live
	}
	var buf bytes.Buffer
	var num []byte
	c.mu.Lock()
	defer c.mu.Unlock()
	if step <= 0 {
		return fmt.Errorf("openmetrics step %s must be positive", step)
	}
	if from.Before(c.now()) {
		return fmt.Errorf("openmetrics from %s is before the model time %s", from.Format(time.RFC3339), c.now().Format(time.RFC3339))
	}
	flush := func(points [][]point) error {
		// points[k][fi] for the k-th timestamp and fi-th (target, family).
		fi := 0
		for _, t := range c.targets {
			for i := range t.families {
				f := &t.families[i]
				typ, name := f.typ, f.name
				if typ == "counter" {
					if base, ok := strings.CutSuffix(name, "_total"); ok {
						name = base
					} else {
						typ = "unknown"
					}
				}
				buf.WriteString("# TYPE " + name + " " + typ + "\n# HELP " + name + " " + f.help + "\n")
				for j := range f.series {
					text := openMetricsSeries(f.series[j].lset)
					for k := range points {
						p := points[k][fi]
						if p.vals == nil {
							continue
						}
						buf.WriteString(text)
						buf.WriteByte(' ')
						num = appendValue(num[:0], f.series[j].vf, p.vals[j])
						buf.Write(num)
						buf.WriteByte(' ')
						buf.WriteString(strconv.FormatFloat(float64(p.ts)/1000, 'f', -1, 64))
						buf.WriteByte('\n')
					}
				}
				fi++
			}
		}
		_, err := w.Write(buf.Bytes())
		buf.Reset()
		return err
	}
	var points [][]point
	for t := from; !t.After(to); t = t.Add(step) {
		c.stepTo(t)
		if len(points) > 0 && c.anyDirty() {
			// Label sets are about to change: write what has the old ones.
			if err := flush(points); err != nil {
				return fmt.Errorf("write openmetrics: %w", err)
			}
			points = points[:0]
		}
		c.refresh()
		var row []point
		for _, tg := range c.targets {
			live := tg.live()
			for i := range tg.families {
				p := point{ts: t.UnixMilli()}
				if live {
					p.vals = fillFamily(&tg.families[i], nil)
				}
				row = append(row, p)
			}
		}
		points = append(points, row)
		if len(points) == chunk {
			if err := flush(points); err != nil {
				return fmt.Errorf("write openmetrics: %w", err)
			}
			points = points[:0]
		}
	}
	if len(points) > 0 {
		if err := flush(points); err != nil {
			return fmt.Errorf("write openmetrics: %w", err)
		}
	}
	if _, err := io.WriteString(w, "# EOF\n"); err != nil {
		return fmt.Errorf("write openmetrics: %w", err)
	}
	return nil
}

func (c *Cluster) anyDirty() bool {
	for _, nd := range c.nodes {
		if nd.dirty {
			return true
		}
	}
	return false
}

// openMetricsSeries is a sample line's text before its value for the stored
// labels lset: the metric name, then the other labels in their order.
func openMetricsSeries(lset labels.Labels) string {
	ls := make([]labels.Label, 0, lset.Len())
	lset.Range(func(l labels.Label) {
		if l.Name != model.MetricNameLabel {
			ls = append(ls, l)
		}
	})
	return seriesText(lset.Get(model.MetricNameLabel), ls)
}
