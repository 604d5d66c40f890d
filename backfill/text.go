package backfill

import (
	"errors"
	"fmt"
	"io"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
)

// Errors returned by ParseText.
var (
	// ErrNoTimestamp means a sample has no timestamp: history needs one.
	ErrNoTimestamp = errors.New("sample without a timestamp")
)

// ParseText parses the Prometheus text format or OpenMetrics text (contentType
// "application/openmetrics-text", else the Prometheus text format), with a
// timestamp on every sample (milliseconds in the Prometheus format, seconds
// in OpenMetrics), into series. Samples of one series may appear anywhere in
// the input and in any order. Native histograms cannot appear in text.
func ParseText(b []byte, contentType string) ([]Series, error) {
	st := labels.NewSymbolTable()
	p, err := textparse.New(b, contentType, st, textparse.ParserOptions{})
	if err != nil {
		return nil, fmt.Errorf("parse backfill input: %w", err)
	}
	// A series is looked up by its text as written first: the labels are
	// parsed (a new string each) only for a spelling not seen before, and
	// then matched by their hash, so that two spellings of one series
	// (label order, quoting) are one series.
	spelled := map[string]int{}
	index := map[uint64][]int{}
	var out []Series
	var lset labels.Labels
	for line := 1; ; line++ {
		e, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("parse backfill input, entry %d: %w", line, err)
		}
		if e != textparse.EntrySeries {
			continue // type, help, unit, comments
		}
		text, ts, v := p.Series()
		idx, ok := spelled[string(text)]
		if !ok || ts == nil {
			p.Labels(&lset)
			if ts == nil {
				return nil, fmt.Errorf("parse backfill input: %s: %w", lset, ErrNoTimestamp)
			}
			h := lset.Hash()
			idx = -1
			for _, i := range index[h] {
				if labels.Equal(out[i].Labels, lset) {
					idx = i
					break
				}
			}
			if idx < 0 {
				idx = len(out)
				index[h] = append(index[h], idx)
				out = append(out, Series{Labels: lset.Copy()})
			}
			spelled[string(text)] = idx
		}
		out[idx].Samples = append(out[idx].Samples, Sample{T: *ts, V: v})
	}
	return out, nil
}
