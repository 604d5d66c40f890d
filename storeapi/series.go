package storeapi

import (
	"fmt"
	"slices"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/thanos-io/thanos/pkg/store/labelpb"
	"github.com/thanos-io/thanos/pkg/store/storepb"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// maxFrameBytes bounds the chunk bytes of one Series frame; a longer series
// is sent in several frames with the same labels, as Thanos' own stores do.
const maxFrameBytes = 1 << 20

type selected struct {
	lbls   labels.Labels
	series storage.Series
}

// Series implements storepb.StoreServer. See the package doc for what an
// answer holds.
func (s *Server) Series(req *storepb.SeriesRequest, srv storepb.Store_SeriesServer) error {
	ctx := srv.Context()
	release, err := s.acquire(ctx, "series")
	if err != nil {
		return err
	}
	defer release()
	ms, ok, err := s.matchers(req.Matchers)
	if err != nil {
		s.rejected.WithLabelValues("bad_request").Inc()
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if !ok {
		return nil
	}
	if len(ms) == 0 {
		s.rejected.WithLabelValues("bad_request").Inc()
		return status.Error(codes.InvalidArgument, "no matchers specified (excluding external labels)")
	}
	fn, rng := funcOf(req)
	hints := &storage.SelectHints{Start: req.MinTime, End: req.MaxTime, Func: fn, Range: rng}
	if req.SkipChunks {
		hints.Func = "series"
	}
	q := s.q.ResolutionQuerier(req.MinTime, req.MaxTime, req.MaxResolutionWindow, s.cfg.querierLookback(req.MaxResolutionWindow))
	defer q.Close() //nolint:errcheck // a querier over immutable data; nothing to flush
	set := q.Select(ctx, true, hints, ms...)

	drop := dropSet(req.WithoutReplicaLabels)
	ext := s.externalLabels(drop)
	shard := req.ShardInfo.Matcher(&s.buffers)
	defer shard.Close()
	var all []selected
	for set.Next() {
		sr := set.At()
		lbls := seriesLabels(sr.Labels(), ext, drop)
		if shard.IsSharded() && !shard.MatchesZLabels(ZLabels(lbls)) {
			continue
		}
		if s.cfg.MaxSeries > 0 && len(all) >= s.cfg.MaxSeries {
			s.rejected.WithLabelValues("max_series").Inc()
			return status.Errorf(codes.ResourceExhausted, "strata: %s: %v: more than %d (storeapi max_series); narrow the selector or the time range",
				describe(req.Matchers), ErrTooManySeries, s.cfg.MaxSeries)
		}
		all = append(all, selected{lbls: lbls, series: sr})
	}
	if err := set.Err(); err != nil {
		if ctx.Err() != nil {
			return status.FromContextError(ctx.Err()).Err()
		}
		return status.Error(codes.Internal, err.Error())
	}
	// External labels and dropped replica labels can change the order of
	// label sets: the Querier merges the stores' streams and needs each
	// sorted by the labels it receives.
	if len(drop) > 0 || !ext.IsEmpty() {
		sortSelected(all)
	}
	if req.Limit > 0 && int64(len(all)) > req.Limit {
		all = all[:req.Limit]
	}
	var samples int
	out := &batcher{srv: srv, size: int(req.ResponseBatchSize)}
	for _, sel := range all {
		zl := ZLabels(sel.lbls)
		if req.SkipChunks {
			if err := out.send(&storepb.Series{Labels: zl}, 0); err != nil {
				return err
			}
			s.series.Inc()
			continue
		}
		n, err := s.sendSeries(out, zl, sel.series, samples)
		samples += n
		if err != nil {
			return err
		}
		s.series.Inc()
	}
	s.samples.Add(float64(samples))
	if err := out.flush(); err != nil {
		return err
	}
	for _, w := range warnings(set.Warnings()) {
		if err := srv.Send(storepb.NewWarnSeriesResponse(fmt.Errorf("strata: %s", w))); err != nil {
			return status.Error(codes.Aborted, err.Error())
		}
	}
	return nil
}

// batcher sends a Series answer's series: one a message, or, when the
// request's ResponseBatchSize is above 1 (Thanos' Querier asks for 64), up
// to that many a message as Thanos' own stores do, which saves the Querier
// a message and a buffered response per series. A message holds about
// maxFrameBytes of chunks at most.
type batcher struct {
	srv   storepb.Store_SeriesServer
	size  int
	batch []*storepb.Series
	bytes int

	// The chunks of the series not yet sent are written into enc's buffer,
	// reused once they are; it iterates series with it (reused too).
	enc xorEncoder
	it  chunkenc.Iterator
}

// send sends s, or adds it to the batch; n is its chunks' bytes.
func (b *batcher) send(s *storepb.Series, n int) error {
	if b.size <= 1 {
		err := b.srv.Send(storepb.NewSeriesResponse(s))
		b.enc.buf = b.enc.buf[:0] // marshalled: the chunks are sent
		if err != nil {
			return status.Error(codes.Aborted, err.Error())
		}
		return nil
	}
	b.batch = append(b.batch, s)
	b.bytes += n
	if len(b.batch) >= b.size || b.bytes >= maxFrameBytes {
		return b.flush()
	}
	return nil
}

// flush sends the batch held, if any.
func (b *batcher) flush() error {
	if len(b.batch) == 0 {
		return nil
	}
	// Send marshals the message before it returns: the batch can be reused.
	err := b.srv.Send(storepb.NewBatchResponse(b.batch))
	clear(b.batch)
	b.batch, b.bytes = b.batch[:0], 0
	b.enc.buf = b.enc.buf[:0]
	if err != nil {
		return status.Error(codes.Aborted, err.Error())
	}
	return nil
}

// sendSeries encodes one series' samples into chunks (floats: XOR chunks
// of at most samplesPerChunk samples, written by xorEncoder; native
// histograms: chunkenc's, of at most 120) and sends them in frames of about
// maxFrameBytes, returning how many samples it sent. before is the samples
// the request sent already (MaxSamples).
func (s *Server) sendSeries(out *batcher, zl []labelpb.ZLabel, sr storage.Series, before int) (int, error) {
	var (
		chunks []storepb.AggrChunk
		frame  int
		n      int
	)
	flush := func() error {
		err := out.send(&storepb.Series{Labels: zl, Chunks: chunks}, frame)
		chunks, frame = nil, 0
		return err
	}
	add := func(c storepb.AggrChunk, samples int) error {
		n += samples
		if s.cfg.MaxSamples > 0 && before+n > s.cfg.MaxSamples {
			s.rejected.WithLabelValues("max_samples").Inc()
			return status.Errorf(codes.ResourceExhausted, "strata: %v: more than %d (storeapi max_samples); narrow the selector or the time range, or query with a coarser step (max_source_resolution)",
				ErrTooManySamples, s.cfg.MaxSamples)
		}
		chunks = append(chunks, c)
		frame += len(c.Raw.Data)
		if frame >= maxFrameBytes {
			return flush()
		}
		return nil
	}
	it := sr.Iterator(out.it)
	out.it = it
	enc := &out.enc
	vt := it.Next()
	for vt == chunkenc.ValFloat {
		enc.begin()
		for ; vt == chunkenc.ValFloat && enc.n < samplesPerChunk; vt = it.Next() {
			t, v := it.At()
			enc.append(t, v)
		}
		data, minT, maxT := enc.end()
		if err := add(storepb.AggrChunk{MinTime: minT, MaxTime: maxT, Raw: &storepb.Chunk{Type: storepb.Chunk_XOR, Data: data}}, enc.n); err != nil {
			return n, err
		}
	}
	if vt != chunkenc.ValNone {
		// A native histogram: the rest of the series through chunkenc.
		cit := storage.NewSeriesToChunkEncoder(seriesFrom{Series: sr, from: it.AtT()}).Iterator(nil)
		for cit.Next() {
			m := cit.At()
			enc, err := chunkEncoding(m.Chunk.Encoding())
			if err != nil {
				return n, status.Error(codes.Internal, err.Error())
			}
			// The encoder's own buffer, one per chunk.
			c := storepb.AggrChunk{MinTime: m.MinTime, MaxTime: m.MaxTime, Raw: &storepb.Chunk{Type: enc, Data: m.Chunk.Bytes()}}
			if err := add(c, m.Chunk.NumSamples()); err != nil {
				return n, err
			}
		}
		if err := cit.Err(); err != nil {
			return n, status.Error(codes.Internal, err.Error())
		}
	} else if err := it.Err(); err != nil {
		return n, status.Error(codes.Internal, err.Error())
	}
	if len(chunks) > 0 {
		return n, flush()
	}
	// No samples in range (the stitched view found the series' labels but
	// nothing to send): like the TSDB's chunk queriers, send nothing.
	return n, nil
}

// seriesFrom is a series' samples from time from on.
type seriesFrom struct {
	storage.Series
	from int64
}

func (s seriesFrom) Iterator(reuse chunkenc.Iterator) chunkenc.Iterator {
	return &iteratorFrom{Iterator: s.Series.Iterator(reuse), from: s.from}
}

type iteratorFrom struct {
	chunkenc.Iterator
	from    int64
	started bool
}

func (i *iteratorFrom) Next() chunkenc.ValueType {
	if !i.started {
		i.started = true
		return i.Iterator.Seek(i.from)
	}
	return i.Iterator.Next()
}

// msTime is a timestamp in ms; Seek's argument is named so that go vet
// does not take chunkenc's Seek for io.Seeker's.
type msTime = int64

func (i *iteratorFrom) Seek(t msTime) chunkenc.ValueType {
	i.started = true
	return i.Iterator.Seek(max(t, i.from))
}

// chunkEncoding maps a TSDB chunk encoding onto the StoreAPI's (one off).
func chunkEncoding(e chunkenc.Encoding) (storepb.Chunk_Encoding, error) {
	switch e {
	case chunkenc.EncXOR:
		return storepb.Chunk_XOR, nil
	case chunkenc.EncHistogram:
		return storepb.Chunk_HISTOGRAM, nil
	case chunkenc.EncFloatHistogram:
		return storepb.Chunk_FLOAT_HISTOGRAM, nil
	}
	return 0, fmt.Errorf("chunk encoding %s has no StoreAPI equivalent", e)
}

func sortSelected(all []selected) {
	slices.SortFunc(all, func(a, b selected) int { return labels.Compare(a.lbls, b.lbls) })
}
