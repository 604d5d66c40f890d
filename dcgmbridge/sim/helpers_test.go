package sim

import (
	"bytes"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
)

// scrape renders a target's exposition at the model's current time.
func scrape(t testing.TB, c *Cluster, path string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := c.WriteExposition(&buf, path); err != nil {
		t.Fatalf("exposition %s: %v", path, err)
	}
	return buf.Bytes()
}

// parsed is one exposition parsed by Prometheus' own text parser.
type parsed struct {
	types   map[string]string  // family -> type
	samples map[string]float64 // series (labels.String) -> value
	byName  map[string][]labels.Labels
}

func parseText(t testing.TB, body []byte, contentType string) parsed {
	t.Helper()
	p, err := textparse.New(body, contentType, labels.NewSymbolTable(), textparse.ParserOptions{})
	if err != nil {
		t.Fatalf("new parser: %v", err)
	}
	out := parsed{types: map[string]string{}, samples: map[string]float64{}, byName: map[string][]labels.Labels{}}
	for {
		e, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		switch e {
		case textparse.EntryType:
			name, typ := p.Type()
			out.types[string(name)] = string(typ)
		case textparse.EntrySeries:
			var l labels.Labels
			p.Labels(&l)
			_, _, v := p.Series()
			out.samples[l.String()] = v
			out.byName[l.Get(model.MetricNameLabel)] = append(out.byName[l.Get(model.MetricNameLabel)], l)
		}
	}
	return out
}

// value returns the single sample of a metric name whose labels include
// the given pairs; it fails when there is not exactly one.
func (p parsed) value(t testing.TB, name string, kv ...string) float64 {
	t.Helper()
	var found []labels.Labels
	for _, l := range p.byName[name] {
		ok := true
		for i := 0; i+1 < len(kv); i += 2 {
			if l.Get(kv[i]) != kv[i+1] {
				ok = false
			}
		}
		if ok {
			found = append(found, l)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s%v: %d matches", name, kv, len(found))
	}
	return p.samples[found[0].String()]
}

func intp(i int) *int { return &i }

func mustNew(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("new cluster: %v", err)
	}
	return c
}

func at(c *Cluster, d time.Duration) time.Time { return c.Config().Start.Add(d) }
