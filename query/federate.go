package query

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"google.golang.org/protobuf/proto"
)

// Federation serves GET /federate as Prometheus does, so that a Prometheus
// can scrape a Strata's series (a global Prometheus pulling the canonical
// strata:* series of each region, for instance): the newest sample within
// the lookback delta of every series a match[] selector selects (none
// answers nothing), stale markers left out, at the sample's timestamp, each
// family untyped (floats) or a histogram, grouped by metric name, and the
// external labels (global.external_labels, and an empty instance) after a
// series' own where it lacks them. The format is negotiated from Accept: the
// protobuf formats, else the text format, which cannot carry a native
// histogram with exponential buckets (those are left out of a text answer,
// as Prometheus leaves them out).
type Federation struct {
	q        storage.Queryable
	parser   parser.Parser
	external labels.Labels
	lookback time.Duration
	now      func() time.Time
	logger   *slog.Logger
	errors   prometheus.Counter
	warnings prometheus.Counter
}

// NewFederation returns the /federate handler over q, parsing match[] with
// p (the query API's parser, API.PinnedExprs, as Prometheus federates with
// its API's); external are the server's external labels, lookback the
// query lookback delta.
func NewFederation(q storage.Queryable, p parser.Parser, external labels.Labels, lookback time.Duration, now func() time.Time, logger *slog.Logger, reg prometheus.Registerer) *Federation {
	f := promauto.With(reg)
	return &Federation{
		q: q, parser: p, external: external, lookback: lookback, now: now, logger: logger,
		errors: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_query_federation_errors_total",
			Help: "Federation requests that failed after their parameters were accepted (a storage error, a write to the client).",
		}),
		warnings: f.NewCounter(prometheus.CounterOpts{
			Name: "strata_query_federation_warnings_total",
			Help: "Warnings the storage returned to federation requests.",
		}),
	}
}

// fedSample is one series' newest sample.
type fedSample struct {
	lbls labels.Labels
	t    int64
	f    float64
	h    *histogram.FloatHistogram // nil: a float
}

func (h *Federation) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, fmt.Sprintf("error parsing form values: %v", err), http.StatusBadRequest)
		return
	}
	var sets [][]*labels.Matcher
	for _, s := range r.Form["match[]"] {
		ms, err := h.parser.ParseMetricSelector(s)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sets = append(sets, ms)
	}
	maxt := h.now().UnixMilli()
	mint := maxt - h.lookback.Milliseconds()
	format := expfmt.NegotiateAccept(r.Header, expfmt.NewFormat(expfmt.TypeProtoDelim), expfmt.NewFormat(expfmt.TypeProtoText),
		expfmt.NewFormat(expfmt.TypeProtoCompact), expfmt.NewFormat(expfmt.TypeTextPlain))
	samples, err := h.newest(r, sets, mint, maxt)
	if err != nil {
		h.errors.Inc()
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", string(format))
	if err := h.encode(expfmt.NewEncoder(w, format), format, samples); err != nil {
		h.errors.Inc()
		h.logger.Error("federation failed", "err", err)
	}
}

// newest is the newest sample in [mint, maxt] of every series the sets
// select (each once), stale markers left out, sorted by metric name.
func (h *Federation) newest(r *http.Request, sets [][]*labels.Matcher, mint, maxt int64) (_ []fedSample, err error) {
	if len(sets) == 0 {
		return nil, nil
	}
	q, err := h.q.Querier(mint, maxt)
	if err != nil {
		return nil, err
	}
	defer func() { err = errors.Join(err, q.Close()) }()
	hints := &storage.SelectHints{Start: mint, End: maxt}
	selected := make([]storage.SeriesSet, len(sets))
	for i, ms := range sets {
		selected[i] = q.Select(r.Context(), true, hints, ms...)
	}
	set := storage.NewMergeSeriesSet(selected, 0, storage.ChainedSeriesMerge)
	var (
		out []fedSample
		it  chunkenc.Iterator
	)
	for set.Next() {
		s := set.At()
		it = s.Iterator(it)
		smp, ok := lastSample(it, mint, maxt)
		if err := it.Err(); err != nil {
			return nil, err
		}
		if !ok || smp.h == nil && value.IsStaleNaN(smp.f) || smp.h != nil && value.IsStaleNaN(smp.h.Sum) {
			continue // the exposition formats have no stale markers
		}
		smp.lbls = s.Labels()
		out = append(out, smp)
	}
	if ws := set.Warnings(); len(ws) > 0 {
		h.logger.Debug("federation select returned warnings", "warnings", ws)
		h.warnings.Add(float64(len(ws)))
	}
	if err := set.Err(); err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b fedSample) int {
		return strings.Compare(a.lbls.Get(model.MetricNameLabel), b.lbls.Get(model.MetricNameLabel))
	})
	return out, nil
}

// lastSample is the newest sample of it in [mint, maxt].
func lastSample(it chunkenc.Iterator, mint, maxt int64) (fedSample, bool) {
	var (
		last  fedSample
		found bool
	)
	for vt := it.Seek(mint); vt != chunkenc.ValNone; vt = it.Next() {
		if it.AtT() > maxt {
			break
		}
		found = true
		switch vt {
		case chunkenc.ValFloat:
			last.t, last.f = it.At()
			last.h = nil
		case chunkenc.ValHistogram, chunkenc.ValFloatHistogram:
			last.t, last.h = it.AtFloatHistogram(nil)
		}
	}
	return last, found
}

// encode writes the samples as metric families: one a run of samples of
// the same name and kind (float, histogram, gauge histogram), as Prometheus
// does; a Prometheus scraping it accepts a name in two families.
func (h *Federation) encode(enc expfmt.Encoder, format expfmt.Format, samples []fedSample) error {
	// The external labels a series lacks follow its own, by name: with an
	// empty instance when the external labels have none, so that the
	// scraping Prometheus (honor_labels) does not give the series its
	// target's.
	var external []labels.Label
	h.external.Range(func(l labels.Label) { external = append(external, l) })
	if !h.external.Has(model.InstanceLabel) {
		external = append(external, labels.Label{Name: model.InstanceLabel})
		slices.SortFunc(external, func(a, b labels.Label) int { return strings.Compare(a.Name, b.Name) })
	}
	binary := format.FormatType() == expfmt.TypeProtoDelim || format.FormatType() == expfmt.TypeProtoText || format.FormatType() == expfmt.TypeProtoCompact
	var fam *dto.MetricFamily
	for _, s := range samples {
		typ := dto.MetricType_UNTYPED
		if s.h != nil {
			if !binary && !s.h.UsesCustomBuckets() {
				continue // the text format has no exponential buckets
			}
			typ = dto.MetricType_HISTOGRAM
			if s.h.CounterResetHint == histogram.GaugeType {
				typ = dto.MetricType_GAUGE_HISTOGRAM
			}
		}
		name := s.lbls.Get(model.MetricNameLabel)
		if name == "" {
			h.logger.Warn("ignoring a nameless series in federation", "series", s.lbls.String())
			continue
		}
		if fam == nil || fam.GetName() != name || fam.GetType() != typ {
			if fam != nil {
				if err := enc.Encode(fam); err != nil {
					return err
				}
			}
			fam = &dto.MetricFamily{Name: &name, Type: typ.Enum()}
		}
		m := &dto.Metric{TimestampMs: &s.t}
		s.lbls.Range(func(l labels.Label) {
			if l.Name != model.MetricNameLabel && l.Value != "" {
				m.Label = append(m.Label, &dto.LabelPair{Name: proto.String(l.Name), Value: proto.String(l.Value)})
			}
		})
		for _, l := range external {
			if s.lbls.Get(l.Name) == "" {
				m.Label = append(m.Label, &dto.LabelPair{Name: proto.String(l.Name), Value: proto.String(l.Value)})
			}
		}
		switch {
		case s.h == nil:
			m.Untyped = &dto.Untyped{Value: &s.f}
		case s.h.UsesCustomBuckets():
			m.Histogram = classicHistogram(s.h)
		default:
			m.Histogram = nativeHistogram(s.h)
		}
		fam.Metric = append(fam.Metric, m)
	}
	if fam == nil {
		return nil
	}
	if err := enc.Encode(fam); err != nil {
		return err
	}
	if c, ok := enc.(expfmt.Closer); ok {
		return c.Close()
	}
	return nil
}

// nativeHistogram is a histogram with exponential buckets as the protobuf
// exposition carries it.
func nativeHistogram(h *histogram.FloatHistogram) *dto.Histogram {
	return &dto.Histogram{
		SampleCountFloat: &h.Count, SampleSum: &h.Sum, Schema: &h.Schema,
		ZeroThreshold: &h.ZeroThreshold, ZeroCountFloat: &h.ZeroCount,
		PositiveCount: h.PositiveBuckets, NegativeCount: h.NegativeBuckets,
		PositiveSpan: spans(h.PositiveSpans), NegativeSpan: spans(h.NegativeSpans),
	}
}

func spans(in []histogram.Span) []*dto.BucketSpan {
	if len(in) == 0 {
		return nil
	}
	out := make([]*dto.BucketSpan, len(in))
	for i, sp := range in {
		out[i] = &dto.BucketSpan{Offset: proto.Int32(sp.Offset), Length: proto.Uint32(sp.Length)}
	}
	return out
}

// classicHistogram is a histogram with custom bucket bounds (NHCB) as a
// classic one: cumulative counts at each bound (+Inf implied).
func classicHistogram(h *histogram.FloatHistogram) *dto.Histogram {
	out := &dto.Histogram{SampleCountFloat: &h.Count, SampleSum: &h.Sum, Bucket: make([]*dto.Bucket, len(h.CustomValues))}
	counts := make([]float64, len(h.CustomValues)+1)
	for it := h.PositiveBucketIterator(); it.Next(); {
		if i := int(it.At().Index); i >= 0 && i < len(counts) {
			counts[i] += it.At().Count
		}
	}
	cum := 0.0
	for i, le := range h.CustomValues {
		cum += counts[i]
		out.Bucket[i] = &dto.Bucket{UpperBound: proto.Float64(le), CumulativeCountFloat: proto.Float64(cum)}
	}
	return out
}
