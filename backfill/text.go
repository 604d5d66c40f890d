package backfill

import (
	"errors"
	"fmt"
	"io"
	"unsafe"

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
	var l seriesList
	if err := parseText(b, contentType, &l, nil); err != nil {
		return nil, err
	}
	return l.out, nil
}

// textSink receives what parseText reads.
type textSink interface {
	// seriesIndex returns the index of the series lset (the same for equal
	// label sets; lset is the parser's and must be copied to be kept).
	seriesIndex(lset labels.Labels) int
	// sample takes a sample of the series at index i.
	sample(i int, t int64, v float64) error
}

// parseText parses b (see ParseText) into sink. read, when set, is told
// now and then how far into b the parser is (every byte before off has
// been parsed), so that a caller can let go of those bytes; an error it
// returns ends the parse.
func parseText(b []byte, contentType string, sink textSink, read func(off int) error) error {
	st := labels.NewSymbolTable()
	p, err := textparse.New(b, contentType, st, textparse.ParserOptions{})
	if err != nil {
		return fmt.Errorf("parse backfill input: %w", err)
	}
	// A series is looked up by its text as written first: the labels are
	// parsed (a new string each) only for a spelling not seen before, and
	// then matched by their hash in the sink, so that two spellings of one
	// series (label order, quoting) are one series.
	spelled := map[string]int{}
	var lset labels.Labels
	for line := 1; ; line++ {
		e, err := p.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("parse backfill input, entry %d: %w", line, err)
		}
		if e != textparse.EntrySeries {
			continue // type, help, unit, comments
		}
		text, ts, v := p.Series()
		idx, ok := spelled[string(text)]
		if !ok || ts == nil {
			p.Labels(&lset)
			if ts == nil {
				return fmt.Errorf("parse backfill input: %s: %w", lset, ErrNoTimestamp)
			}
			idx = sink.seriesIndex(lset)
			spelled[string(text)] = idx
		}
		if err := sink.sample(idx, *ts, v); err != nil {
			return err
		}
		if read != nil && line%65536 == 0 {
			if off, ok := offsetIn(b, text); ok {
				if err := read(off); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// offsetIn returns where sub starts in b, when sub is a part of b.
func offsetIn(b, sub []byte) (int, bool) {
	if len(b) == 0 || len(sub) == 0 {
		return 0, false
	}
	off := uintptr(unsafe.Pointer(unsafe.SliceData(sub))) - uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if off >= uintptr(len(b)) { // before b wraps around
		return 0, false
	}
	return int(off), true
}

// labelIndex numbers label sets in the order first seen, equal sets one
// number: the series of a parse, for ParseText and Spool alike.
type labelIndex struct {
	sets   []labels.Labels
	byHash map[uint64][]int
}

// index returns lset's number, keeping a copy of lset when it is new.
func (x *labelIndex) index(lset labels.Labels) int {
	if x.byHash == nil {
		x.byHash = map[uint64][]int{}
	}
	h := lset.Hash()
	for _, i := range x.byHash[h] {
		if labels.Equal(x.sets[i], lset) {
			return i
		}
	}
	x.byHash[h] = append(x.byHash[h], len(x.sets))
	x.sets = append(x.sets, lset.Copy())
	return len(x.sets) - 1
}

// seriesList is ParseText's sink: the series in memory.
type seriesList struct {
	ids labelIndex
	out []Series
}

func (l *seriesList) seriesIndex(lset labels.Labels) int {
	i := l.ids.index(lset)
	if i == len(l.out) {
		l.out = append(l.out, Series{Labels: l.ids.sets[i]})
	}
	return i
}

func (l *seriesList) sample(i int, t int64, v float64) error {
	l.out[i].Samples = append(l.out[i].Samples, Sample{T: t, V: v})
	return nil
}
