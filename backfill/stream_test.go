package backfill

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"

	"github.com/strata-dev/strata/tiers"
)

// streamInput is history() plus series whose last window of an hour is
// ended by a stale marker just inside, or just beyond, StaleLookahead after
// the hour, a repeated timestamp, and a series that appears mid-way.
func streamInput(start, end int64) []Series {
	in := history(start, end)
	stale := math.Float64frombits(value.StaleNaN)
	mk := func(name string) labels.Labels { return labels.FromStrings(model.MetricNameLabel, name) }
	h := start - start%hour + 2*hour
	in = append(in,
		Series{Labels: mk("stale_inside"), Samples: []Sample{{h - 50_000, 1}, {h - 10_000, 2}, {h + 4*minute, stale}, {h + hour, 3}}},
		Series{Labels: mk("stale_beyond"), Samples: []Sample{{h - 1, 5}, {h + 5*minute + 1, stale}, {h + 2*hour, 6}}},
		Series{Labels: mk("repeated"), Samples: []Sample{{h + 10, 1}, {h + 20, 2}, {h + 20, 7}, {h + 90_000, 8}}},
		Series{Labels: mk("late_joiner"), Samples: []Sample{{end - 3*hour, 1}, {end - 2*hour, 9}}},
	)
	return in
}

// interleave returns every sample of in in time order; samples sharing a
// timestamp come in an order that changes with the timestamp, so the
// stream's series prediction misses as well as hits.
func interleave(in []Series) []struct {
	l labels.Labels
	s Sample
} {
	type item = struct {
		l labels.Labels
		s Sample
	}
	var out []item
	for _, s := range in {
		for _, x := range s.Samples {
			out = append(out, item{s.Labels, x})
		}
	}
	slices.SortStableFunc(out, func(a, b item) int {
		if c := cmp.Compare(a.s.T, b.s.T); c != 0 {
			return c
		}
		if (a.s.T/30_000)%7 == 3 { // every seventh timestamp reverses the order
			return labels.Compare(b.l, a.l)
		}
		return 0
	})
	return out
}

// TestStreamEqualsRun: a Stream writes the same minute and hour partitions
// as Run for the same samples (no raw tier), stale markers at hour edges,
// counter resets on hour boundaries and repeated timestamps included.
func TestStreamEqualsRun(t *testing.T) {
	input := streamInput(histStart, histEnd)
	cfg := testConfig()
	cfg.Now = func() time.Time { return time.UnixMilli(histEnd) }

	ref := openEnv(t, false)
	if _, err := Run(context.Background(), cfg, input, ref.targets(), nil); err != nil {
		t.Fatal(err)
	}

	got := openEnv(t, false)
	st, err := NewStream(context.Background(), cfg, got.targets())
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range interleave(input) {
		if err := st.Append(x.l, x.s.T, x.s.V); err != nil {
			t.Fatal(err)
		}
	}
	res, err := st.Close()
	if err != nil {
		t.Fatal(err)
	}
	if res.PartitionsWritten == 0 {
		t.Fatal("the stream wrote nothing")
	}

	sameRollups(t, ref, got)
}

// TestStreamRejectsOutOfOrder: a sample older than the newest one is an
// error, and the stream stays failed.
func TestStreamRejectsOutOfOrder(t *testing.T) {
	e := openEnv(t, false)
	st, err := NewStream(context.Background(), testConfig(), e.targets())
	if err != nil {
		t.Fatal(err)
	}
	l := labels.FromStrings(model.MetricNameLabel, "x")
	if err := st.Append(l, histStart+1000, 1); err != nil {
		t.Fatal(err)
	}
	if err := st.Append(l, histStart, 2); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("got %v, want ErrOutOfOrder", err)
	}
	if _, err := st.Close(); !errors.Is(err, ErrOutOfOrder) {
		t.Fatalf("Close after a failure: %v", err)
	}
}

// TestStreamNeedsRollupTiersOnly: a stream refuses a raw target.
func TestStreamNeedsRollupTiersOnly(t *testing.T) {
	e := openEnv(t, true)
	if _, err := NewStream(context.Background(), testConfig(), e.targets()); err == nil {
		t.Fatal("a stream into the raw tier was accepted")
	}
}

// TestStreamNeverOverwrites: an existing minute partition is skipped.
func TestStreamNeverOverwrites(t *testing.T) {
	e := openEnv(t, false)
	h := histStart - histStart%hour
	if err := e.minute.WritePartition(h, nil); err != nil {
		t.Fatal(err)
	}
	st, err := NewStream(context.Background(), testConfig(), e.targets())
	if err != nil {
		t.Fatal(err)
	}
	l := labels.FromStrings(model.MetricNameLabel, "x")
	for ts := h; ts < h+2*hour; ts += 30_000 {
		if err := st.Append(l, ts, 1); err != nil {
			t.Fatal(err)
		}
	}
	res, err := st.Close()
	if err != nil {
		t.Fatal(err)
	}
	if res.PartitionsSkipped != 1 {
		t.Errorf("skipped %d partitions, want 1", res.PartitionsSkipped)
	}
	got, err := e.minute.Select(context.Background(), h, h+hour-1)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Errorf("the existing empty partition was overwritten: %d series", len(got))
	}
}

// sameRollups checks that got's minute and hour tiers hold the partitions
// of want's, each with the same windows.
func sameRollups(t *testing.T, want, got env) {
	t.Helper()
	for _, tier := range []struct {
		name      string
		want, got *tiers.Rollup
		span      int64
	}{{"minute", want.minute, got.minute, hour}, {"hour", want.hour, got.hour, day}} {
		if a, b := starts(tier.want), starts(tier.got); !slices.Equal(a, b) {
			t.Fatalf("%s partitions %v, want %v", tier.name, b, a)
		}
		for _, p := range starts(tier.want) {
			w, err := tier.want.Select(context.Background(), p, p+tier.span-1)
			if err != nil {
				t.Fatal(err)
			}
			checkPartition(t, tier.name+" "+fmtMs(p), tier.got, p, tier.span, w)
		}
	}
}

func starts(r *tiers.Rollup) []int64 {
	var out []int64
	for _, p := range r.Partitions() {
		out = append(out, p.Start)
	}
	slices.Sort(out)
	return out
}
