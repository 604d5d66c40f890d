package rulestale

import (
	"context"
	"testing"
	"time"
	"unsafe"

	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"
)

// heldStore holds label sets and answers GetRef for them, as a TSDB head
// does; it counts the appenders opened and rolled back.
type heldStore struct {
	held             map[uint64]labels.Labels
	opened, rolled   int
	appended, commit int
}

func (h *heldStore) AppenderV2(context.Context) storage.AppenderV2 {
	h.opened++
	return heldApp{h}
}

type heldApp struct{ h *heldStore }

func (a heldApp) GetRef(l labels.Labels, hash uint64) (storage.SeriesRef, labels.Labels) {
	if hash != l.Hash() {
		panic("GetRef given another hash than the labels'")
	}
	if x, ok := a.h.held[hash]; ok && labels.Equal(x, l) {
		return storage.SeriesRef(hash), x
	}
	return 0, labels.EmptyLabels()
}

func (a heldApp) Append(storage.SeriesRef, labels.Labels, int64, int64, float64, *histogram.Histogram, *histogram.FloatHistogram, storage.AppendV2Options) (storage.SeriesRef, error) {
	a.h.appended++
	return 0, nil
}
func (a heldApp) Commit() error   { a.h.commit++; return nil }
func (a heldApp) Rollback() error { a.h.rolled++; return nil }

// sink keeps the label sets appended to it.
type sink struct{ got map[string]labels.Labels }

func (s *sink) AppenderV2(context.Context) storage.AppenderV2 { return sinkApp{s} }

type sinkApp struct{ s *sink }

func (a sinkApp) Append(_ storage.SeriesRef, l labels.Labels, _, _ int64, _ float64, _ *histogram.Histogram, _ *histogram.FloatHistogram, _ storage.AppendV2Options) (storage.SeriesRef, error) {
	a.s.got[l.String()] = l
	return 0, nil
}
func (sinkApp) Commit() error   { return nil }
func (sinkApp) Rollback() error { return nil }

// sameBytes reports whether a and b are the same label set in memory, not
// two copies (the stringlabels representation: one string).
func sameBytes(t *testing.T, a, b labels.Labels) bool {
	if unsafe.Sizeof(a) != unsafe.Sizeof("") {
		t.Skip("labels are not one string in this build")
	}
	return unsafe.StringData(*(*string)(unsafe.Pointer(&a))) == unsafe.StringData(*(*string)(unsafe.Pointer(&b)))
}

// TestShareLabels: a recording rule's new series takes the label set the
// shared store holds for the same labels, a series it does not hold gets a
// copy of its own, the samples still go to the rule's storage only, and
// the shared store's appender is rolled back after each result that had
// new series.
func TestShareLabels(t *testing.T) {
	a := labels.FromStrings("__name__", "strata:sm", "gpu", "0", "job", "dcgm")
	b := labels.FromStrings("__name__", "strata:sm", "gpu", "1", "job", "dcgm")
	src := &heldStore{held: map[uint64]labels.Labels{a.Hash(): a}}
	dst := &sink{got: map[string]labels.Labels{}}
	query := func(_ context.Context, _ string, ts time.Time) (promql.Vector, error) {
		// The rule's query returns fresh label sets, without the name.
		return promql.Vector{
			{T: ts.UnixMilli(), F: 1, Metric: labels.FromStrings("gpu", "0", "job", "dcgm")},
			{T: ts.UnixMilli(), F: 2, Metric: labels.FromStrings("gpu", "1", "job", "dcgm")},
		}, nil
	}
	tr := New()
	tr.ShareLabels(src)
	opts := &rules.ManagerOptions{QueryFunc: tr.QueryFunc(query), AppendableV2: tr.Appendable(dst), Metrics: tr.Metrics(nil), Context: context.Background()}
	g := rules.NewGroup(rules.GroupOptions{Name: "g", File: "f", Interval: time.Minute, Opts: opts,
		Rules: []rules.Rule{rules.NewRecordingRule("strata:sm", mustParse(t, "x"), labels.EmptyLabels())}})
	iter := tr.EvalIterationFunc(nil)
	for i := range 3 {
		iter(context.Background(), g, time.Unix(int64(60*(i+1)), 0))
		if err := g.Rules()[0].LastError(); err != nil {
			t.Fatal(err)
		}
	}
	gotA, gotB := dst.got[a.String()], dst.got[b.String()]
	if gotA.IsEmpty() || gotB.IsEmpty() || len(dst.got) != 2 {
		t.Fatalf("appended %v", dst.got)
	}
	if !sameBytes(t, gotA, a) {
		t.Error("the series the shared store holds was appended with a copy of its labels")
	}
	if sameBytes(t, gotB, b) {
		t.Error("a series the shared store does not hold shares the test's own label set")
	}
	// Only the first evaluation has new series: one appender, rolled
	// back, nothing appended or committed to the shared store.
	if src.opened != 1 || src.rolled != 1 || src.appended != 0 || src.commit != 0 {
		t.Errorf("shared store: %d appenders opened, %d rolled back, %d appends, %d commits; want 1, 1, 0, 0",
			src.opened, src.rolled, src.appended, src.commit)
	}
}
