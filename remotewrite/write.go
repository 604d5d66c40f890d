package remotewrite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/exemplar"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/metadata"
	"github.com/prometheus/prometheus/storage"
)

// Extra rejection reasons that only the handler produces.
const (
	reasonMixedSeries        = "samples_and_histograms"
	reasonExemplarOutOfOrder = "exemplar_out_of_order"
	reasonExemplarNoStorage  = "exemplar_storage_disabled"
)

// maxErrorsKept bounds the distinct problems listed in a 400 body.
const maxErrorsKept = 8

// writeResult is what one request wrote and what it rejected.
type writeResult struct {
	samples, histograms, exemplars int // written (committed)
	received                       int // samples + histograms + exemplars in the request
	rejected                       int // elements not written
	problems                       int // rejections, counting series-level ones without elements
	msgs                           []string
	fatal                          error // storage failure: everything rolled back
}

func (r *writeResult) rejectedCount() int { return r.problems }

// message renders the 400 body: how many elements were rejected and the first
// few reasons, cut to maxBytes.
func (r *writeResult) message(maxBytes int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d samples, histograms and exemplars rejected: ", r.rejected, r.received)
	for i, m := range r.msgs {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(m)
	}
	if more := r.problems - len(r.msgs); more > 0 {
		fmt.Fprintf(&b, "; and %d more", more)
	}
	s := b.String()
	if len(s) > maxBytes {
		const ellipsis = " [truncated]"
		cut := max(maxBytes-len(ellipsis), 0)
		s = strings.ToValidUTF8(s[:cut], "") + ellipsis
	}
	return s
}

// writeState is the scratch space of one request's appends, pooled with the
// decoder so the steady state reuses it.
type writeState struct {
	sb        labels.ScratchBuilder
	key       labels.Labels // a series' labels in sb's reusable buffer, see encode
	probes    []probe       // the series cache's answer per series, see probeAll
	keys      []byte        // a probe chunk's series' encoded labels, see probeAll
	order     []int32       // series indexes grouped by cache shard
	scratch   []byte
	exemplars []exemplar.Exemplar
	newest    int64 // the newest timestamp the limits accept, for this request
	meta      metaMemo
	res       writeResult
}

// metaMemo is the last family whose RW 2.0 series metadata a request set
// and what the store answered: a request's series come in runs of one
// family (a histogram's buckets, sum and count; a metric's series one after
// the other, as exporters expose them), and each run then pays the store's
// lock and map lookup once instead of once per series (about 60-80 ns per
// series at 100,000 series). family and m are views into the request.
type metaMemo struct {
	family string
	m      Metadata
	stored metadata.Metadata
	ok     bool
}

// setMetadata is h.meta.Set(family, m), answered from st.meta when the
// request's previous call was for the same family and metadata.
func (h *Handler) setMetadata(st *writeState, family string, m Metadata) (metadata.Metadata, bool) {
	if mm := &st.meta; mm.family == family && mm.m == m && family != "" {
		return mm.stored, mm.ok
	}
	stored, ok := h.meta.Set(family, m)
	st.meta = metaMemo{family: family, m: m, stored: stored, ok: ok}
	return stored, ok
}

func (h *Handler) rejectElems(res *writeResult, reason string, elements int, err error) {
	res.rejected += elements
	res.problems++
	if len(res.msgs) < maxErrorsKept {
		res.msgs = append(res.msgs, err.Error())
	}
	// A series rejected without any element in it (an empty RW 2.0 series)
	// counts as one, so that its reason shows in the metric.
	h.m.rejected.WithLabelValues(reason).Add(float64(max(elements, 1)))
}

// write appends a decoded request in one storage transaction: the valid part
// is committed even when some series or samples are rejected (the response is
// then 400), and nothing is committed when the storage itself fails (500, so
// the sender's retry is safe).
func (h *Handler) write(ctx context.Context, ver protoVersion, req *Request, st *writeState) *writeResult {
	res := &st.res
	*res = writeResult{msgs: res.msgs[:0]}
	var nSamples, nHistograms, nExemplars int
	for i := range req.Series {
		s := &req.Series[i]
		nSamples += len(s.Samples)
		nHistograms += len(s.Histograms)
		nExemplars += len(s.Exemplars)
	}
	res.received = nSamples + nHistograms + nExemplars
	h.m.samples.Add(float64(nSamples))
	h.m.histograms.Add(float64(nHistograms))
	h.m.exemplars.Add(float64(nExemplars))
	for _, m := range req.Metadata {
		h.meta.Set(m.Family, m.Metadata)
	}

	for i := range req.Series {
		sortLabels(req.Series[i].Labels)
	}
	// The memo's views must not outlive the request's buffer.
	st.meta = metaMemo{}
	defer func() { st.meta = metaMemo{} }()
	if h.cache != nil {
		h.probeAll(req.Series, st)
		// The pooled state must not keep the cached label sets alive
		// after the request: the head may drop their series.
		defer clear(st.probes)
	}
	app := h.app.AppenderV2(ctx)
	now := h.now()
	st.newest = h.cfg.Limits.newestAllowed(now)
	for i := range req.Series {
		if err := h.writeSeries(app, ver, i, &req.Series[i], st, now); err != nil {
			res.fatal = err
			break
		}
	}
	if res.fatal != nil {
		if err := app.Rollback(); err != nil {
			res.fatal = errors.Join(res.fatal, fmt.Errorf("rollback: %w", err))
		}
		return res
	}
	if err := app.Commit(); err != nil {
		res.fatal = fmt.Errorf("commit: %w", err)
		return res
	}
	// The metadata this request changed is logged before the 2xx, as its
	// samples are in the WAL: both survive a kill -9.
	if err := h.meta.Sync(); err != nil {
		res.fatal = fmt.Errorf("log metadata: %w", err)
	}
	return res
}

// classifyAppendErr maps the TSDB's per-sample errors to rejection reasons;
// ok is false for errors that are our own failure (500).
func classifyAppendErr(err error) (reason string, ok bool) {
	switch {
	case errors.Is(err, storage.ErrOutOfOrderSample):
		return ReasonOutOfOrder, true
	case errors.Is(err, storage.ErrTooOldSample), errors.Is(err, storage.ErrOutOfBounds):
		return ReasonTooOld, true
	case errors.Is(err, storage.ErrDuplicateSampleForTimestamp):
		return ReasonDuplicateTimestamp, true
	case isHistogramValidationError(err), errors.Is(err, storage.ErrNativeHistogramsDisabled):
		return ReasonBadHistogram, true
	}
	return "", false
}

// metadataFamily returns the family a series' metadata belongs to: its
// metric name, without the _bucket/_count/_sum suffix of classic histogram
// and summary series, so /api/v1/metadata lists "foo" as a scrape would.
func metadataFamily(name string, typ model.MetricType) string {
	switch typ {
	case model.MetricTypeHistogram, model.MetricTypeGaugeHistogram, model.MetricTypeSummary:
		for _, suf := range [...]string{"_bucket", "_count", "_sum"} {
			if f, ok := strings.CutSuffix(name, suf); ok {
				return f
			}
		}
	}
	return name
}

func (h *Handler) writeSeries(app storage.AppenderV2, ver protoVersion, idx int, s *Series, st *writeState, now time.Time) error {
	res := &st.res
	lim := h.cfg.Limits
	nElems := len(s.Samples) + len(s.Histograms) + len(s.Exemplars)
	if s.Err != nil {
		h.rejectElems(res, ReasonBadSymbolRef, nElems, fmt.Errorf("series #%d: %w", idx, s.Err))
		return nil
	}
	// A label set found in the series cache was validated when it entered the
	// cache (only appended series are cached, and the limits never change), so
	// only new series pay for validation, UTF-8 checks included.
	ls, ref, hash, cached := h.seriesLabels(idx, s.Labels, st)
	var name string
	if cached {
		if !s.Metadata.IsEmpty() {
			name = ls.Get(model.MetricNameLabel)
		}
	} else {
		var c labelChecker
		for _, l := range s.Labels {
			c.check(lim, l.Name, l.Value)
			if c.reason != "" {
				break
			}
			if l.Name == model.MetricNameLabel {
				name = l.Value
			}
		}
		if reason, err := c.finish(lim); err != nil {
			h.rejectElems(res, reason, nElems, fmt.Errorf("series %s: %w", formatLabels(s.Labels), err))
			return nil
		}
	}
	if ver == version2 {
		switch {
		case len(s.Samples) == 0 && len(s.Histograms) == 0:
			h.rejectElems(res, ReasonEmptySeries, nElems, fmt.Errorf("series %s: TimeSeries must contain at least one sample or histogram", formatLabels(s.Labels)))
			return nil
		case len(s.Samples) > 0 && len(s.Histograms) > 0:
			h.rejectElems(res, reasonMixedSeries, nElems, fmt.Errorf("series %s: TimeSeries must not contain both samples and histograms", formatLabels(s.Labels)))
			return nil
		}
	}

	cachedRef := ref
	var opts storage.AppendV2Options
	if !s.Metadata.IsEmpty() {
		if md, ok := h.setMetadata(st, metadataFamily(name, s.Metadata.Type), s.Metadata); ok {
			opts.Metadata = md
		}
	}
	stZero := h.cfg.IngestSTZeroSample && s.Metadata.Type != model.MetricTypeGauge
	var lastST int64

	for _, smp := range s.Samples {
		if smp.Timestamp > st.newest {
			reason, err := lim.CheckTimestamp(smp.Timestamp, now)
			h.rejectElems(res, reason, 1, fmt.Errorf("series %s: %w", formatLabels(s.Labels), err))
			continue
		}
		stamp := smp.StartTimestamp
		if stamp == 0 {
			stamp = s.CreatedTimestamp
		}
		if stZero && stamp != 0 && stamp < smp.Timestamp && stamp != lastST {
			lastST = stamp
			// Best effort, like Prometheus: an ST older than what the series
			// holds is simply not ingested.
			if r, err := app.Append(ref, ls, 0, stamp, 0, nil, nil, storage.AppendV2Options{RejectOutOfOrder: true}); err == nil {
				ref = r
			}
		}
		r, err := app.Append(ref, ls, stamp, smp.Timestamp, smp.Value, nil, nil, opts)
		if err != nil && !errors.Is(err, (*storage.AppendPartialError)(nil)) {
			reason, ok := classifyAppendErr(err)
			if !ok {
				return fmt.Errorf("append sample to series %s: %w", ls.String(), err)
			}
			h.rejectElems(res, reason, 1, fmt.Errorf("series %s at %d: %w", formatLabels(s.Labels), smp.Timestamp, err))
			continue
		}
		ref = r
		res.samples++
	}
	for _, hs := range s.Histograms {
		if err := h.appendHistogram(app, &ref, ls, s, hs, st, stZero, &lastST, opts, now); err != nil {
			return err
		}
	}
	if h.cache != nil && ref != 0 && (!cached || ref != cachedRef) {
		h.cache.put(hash, h.stableLabels(app, ls, hash, ref), ref)
	}
	if len(s.Exemplars) > 0 {
		h.appendExemplars(app, ver, ref, ls, s, st)
	}
	return nil
}

func (h *Handler) appendHistogram(app storage.AppenderV2, ref *storage.SeriesRef, ls labels.Labels, s *Series, hs Histogram, st *writeState, stZero bool, lastST *int64, opts storage.AppendV2Options, now time.Time) error {
	res := &st.res
	if reason, err := h.cfg.Limits.CheckTimestamp(hs.Timestamp, now); err != nil {
		h.rejectElems(res, reason, 1, fmt.Errorf("series %s: %w", formatLabels(s.Labels), err))
		return nil
	}
	if err := prepareHistogram(hs); err != nil {
		h.rejectElems(res, ReasonBadHistogram, 1, fmt.Errorf("series %s at %d: %w", formatLabels(s.Labels), hs.Timestamp, err))
		return nil
	}
	stamp := hs.StartTimestamp
	if stamp == 0 {
		stamp = s.CreatedTimestamp
	}
	if stZero && stamp != 0 && stamp < hs.Timestamp && stamp != *lastST {
		*lastST = stamp
		zh, zfh := zeroHistogram(hs)
		if r, err := app.Append(*ref, ls, 0, stamp, 0, zh, zfh, storage.AppendV2Options{RejectOutOfOrder: true}); err == nil {
			*ref = r
		}
	}
	r, err := app.Append(*ref, ls, stamp, hs.Timestamp, 0, hs.H, hs.FH, opts)
	if err != nil && !errors.Is(err, (*storage.AppendPartialError)(nil)) {
		reason, ok := classifyAppendErr(err)
		if !ok {
			return fmt.Errorf("append histogram to series %s: %w", ls.String(), err)
		}
		h.rejectElems(res, reason, 1, fmt.Errorf("series %s at %d: %w", formatLabels(s.Labels), hs.Timestamp, err))
		return nil
	}
	*ref = r
	res.histograms++
	return nil
}

// prepareHistogram validates a native histogram and, like Prometheus, lowers
// the resolution of schemas finer than the TSDB supports (9..52) to 8.
func prepareHistogram(hs Histogram) error {
	if hs.H != nil {
		if !histogram.IsKnownSchema(hs.H.Schema) {
			return histogram.UnknownSchemaError(hs.H.Schema)
		}
		if hs.H.Schema > histogram.ExponentialSchemaMax {
			if err := hs.H.ReduceResolution(histogram.ExponentialSchemaMax); err != nil {
				return err
			}
		}
		return hs.H.Validate()
	}
	if !histogram.IsKnownSchema(hs.FH.Schema) {
		return histogram.UnknownSchemaError(hs.FH.Schema)
	}
	if hs.FH.Schema > histogram.ExponentialSchemaMax {
		if err := hs.FH.ReduceResolution(histogram.ExponentialSchemaMax); err != nil {
			return err
		}
	}
	return hs.FH.Validate()
}

// zeroHistogram is the start-timestamp sample of a histogram series: empty,
// marked as a counter reset, with the same schema so no new chunk is cut.
func zeroHistogram(hs Histogram) (*histogram.Histogram, *histogram.FloatHistogram) {
	if hs.H != nil {
		return &histogram.Histogram{CounterResetHint: histogram.CounterReset, Schema: hs.H.Schema,
			ZeroThreshold: hs.H.ZeroThreshold, CustomValues: hs.H.CustomValues}, nil
	}
	return nil, &histogram.FloatHistogram{CounterResetHint: histogram.CounterReset, Schema: hs.FH.Schema,
		ZeroThreshold: hs.FH.ZeroThreshold, CustomValues: hs.FH.CustomValues}
}

// appendExemplars stores a series' exemplars in the TSDB's exemplar storage.
// RW 2.0 counts only stored exemplars in its header and reports the others in
// the 400; for RW 1.0, as in Prometheus, exemplar problems are only counted
// and logged, because 1.0 senders cannot tell which part of a 400 failed.
func (h *Handler) appendExemplars(app storage.AppenderV2, ver protoVersion, ref storage.SeriesRef, ls labels.Labels, s *Series, st *writeState) {
	res := &st.res
	reject := func(reason string, n int, err error) {
		if ver == version2 {
			h.rejectElems(res, reason, n, err)
			return
		}
		h.m.rejected.WithLabelValues(reason).Add(float64(n))
		h.logger.Debug("remote-write 1.0 exemplars dropped", "series", ls.String(), "err", err)
	}
	exApp, ok := app.(storage.ExemplarAppenderV2)
	if !ok {
		reject(reasonExemplarNoStorage, len(s.Exemplars), fmt.Errorf("series %s: exemplar storage is not available", formatLabels(s.Labels)))
		return
	}
	if ref == 0 {
		reject(ReasonBadExemplar, len(s.Exemplars), fmt.Errorf("series %s: exemplars of a series with no sample written", formatLabels(s.Labels)))
		return
	}
	exs := st.exemplars[:0]
	for _, e := range s.Exemplars {
		if e.Err != nil {
			reject(ReasonBadExemplar, 1, fmt.Errorf("series %s: %w", formatLabels(s.Labels), e.Err))
			continue
		}
		el, err := exemplarLabels(e.Labels, &st.sb)
		if err != nil {
			reject(ReasonBadExemplar, 1, fmt.Errorf("series %s: exemplar: %w", formatLabels(s.Labels), err))
			continue
		}
		exs = append(exs, exemplar.Exemplar{Labels: el, Value: e.Value, Ts: e.Timestamp, HasTs: true})
	}
	st.exemplars = exs[:0]
	if len(exs) == 0 {
		return
	}
	slices.SortFunc(exs, exemplar.Compare)
	_, err := exApp.AppendExemplars(ref, ls, exs)
	if err == nil {
		res.exemplars += len(exs)
		return
	}
	pErr, ok := errors.AsType[*storage.AppendPartialError](err)
	if !ok {
		reject(ReasonBadExemplar, len(exs), fmt.Errorf("series %s: exemplars: %w", formatLabels(s.Labels), err))
		return
	}
	failed := make(map[int]error, len(pErr.ExemplarErrors))
	for _, ee := range pErr.ExemplarErrors {
		failed[ee.Index] = ee.Err
	}
	for _, e := range failed {
		reason := ReasonBadExemplar
		if errors.Is(e, storage.ErrOutOfOrderExemplar) {
			reason = reasonExemplarOutOfOrder
		}
		reject(reason, 1, fmt.Errorf("series %s: exemplar: %w", formatLabels(s.Labels), e))
	}
	res.exemplars += len(exs) - len(failed)
}

// exemplarLabels copies an exemplar's label views into a sorted label set;
// the exemplar storage keeps it, so it cannot point into the request.
func exemplarLabels(views []Label, sb *labels.ScratchBuilder) (labels.Labels, error) {
	sb.Reset()
	for _, l := range views {
		if l.Value == "" {
			continue
		}
		if l.Name == "" {
			return labels.EmptyLabels(), errors.New("empty label name")
		}
		sb.Add(l.Name, l.Value)
	}
	sb.Sort()
	ls := sb.Labels()
	if !ls.IsValid(model.UTF8Validation) {
		return labels.EmptyLabels(), errors.New("labels are not valid UTF-8")
	}
	if dup, ok := ls.HasDuplicateLabelNames(); ok {
		return labels.EmptyLabels(), fmt.Errorf("duplicate label name %q", dup)
	}
	return ls, nil
}

// sortLabels sorts label views by name in place unless already sorted (the
// common case, checked without sorting). Duplicates end up adjacent, where
// the checker finds them.
func sortLabels(ls []Label) {
	for i := 1; i < len(ls); i++ {
		if ls[i].Name < ls[i-1].Name {
			slices.SortStableFunc(ls, func(a, b Label) int { return strings.Compare(a.Name, b.Name) })
			return
		}
	}
}

// formatLabels renders label views for an error message, each value cut
// short and the whole bounded, so a hostile series cannot bloat a response.
func formatLabels(ls []Label) string {
	const maxLen = 256
	var b strings.Builder
	b.WriteByte('{')
	for i, l := range ls {
		if i > 0 {
			b.WriteString(", ")
		}
		if b.Len() > maxLen {
			b.WriteString("...")
			break
		}
		if len(l.Name) > 64 {
			b.WriteString(quoteTrunc(l.Name))
		} else {
			b.WriteString(l.Name)
		}
		b.WriteByte('=')
		b.WriteString(quoteTrunc(l.Value))
	}
	b.WriteByte('}')
	return b.String()
}
