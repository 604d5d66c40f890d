package rulestale

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/histogram"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/timestamp"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/rules"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/internal/labelshare"
)

// PlaceholderLabel is the only label (besides the rule's name and labels)
// of the placeholder series a recording rule returns to rules.Group in place
// of its result; its value is the Tracker's id of that result. Placeholders
// never reach the storage. A rule whose own labels set this name is
// evaluated as Prometheus does (its series in the group's state).
const PlaceholderLabel = "__strata_rule_state__"

// Tracker keeps the stale-marker state of recording rules (package doc).
// One Tracker serves any number of groups; its QueryFunc, Appendable,
// EvalIterationFunc and Metrics must all be given to the groups it serves
// (rules.ManagerOptions, rules.Manager.Update). Safe for concurrent use by
// groups evaluating concurrently.
type Tracker struct {
	mu      sync.Mutex
	lastID  uint64
	pending map[uint64]*result    // returned to a rule, not yet appended
	sets    map[uint64]*seriesSet // committed: a rule evaluation's output
	// last is each rule's latest committed set (one of sets), whose
	// label sets its next result reuses (QueryFunc).
	last  map[*rules.RecordingRule]*seriesSet
	iters map[string]*iteration // group key -> the evaluation in progress
	// hash is labels.Labels.Hash; tests make it collide.
	hash func(labels.Labels) uint64
	// shared holds label sets a new series' labels may be taken from
	// (ShareLabels; nil: none).
	shared storage.AppendableV2
}

// ShareLabels makes a series a recording rule writes for the first time
// take its label set from src when src holds a series with the same
// labels (through its appenders' storage.GetRef, as the raw tier's), instead
// of a copy of its own. The diagnosis engine records the canonical signals
// again in its scratch store, every one of which the canonical rules
// record in the raw tier too: sharing the head's label sets saves one copy
// of each. An appender of src is opened for the lookups of a rule's result
// that has new series and rolled back after them; nothing is appended to
// src. Call before the first evaluation.
func (tr *Tracker) ShareLabels(src storage.AppendableV2) { tr.shared = src }

// New returns an empty Tracker.
func New() *Tracker {
	return &Tracker{
		pending: map[uint64]*result{},
		sets:    map[uint64]*seriesSet{},
		last:    map[*rules.RecordingRule]*seriesSet{},
		iters:   map[string]*iteration{},
		hash:    labels.Labels.Hash,
	}
}

// entry is a series a rule wrote: its labels and their hash, by which a
// seriesSet is sorted.
type entry struct {
	h uint64
	l labels.Labels
}

// seriesSet is the series one evaluation of a rule wrote (what Group.Eval
// keeps in its seriesInPreviousEval map), sorted by hash.
type seriesSet struct {
	entries []entry
	// refs are, for an appendable whose appenders resolve references
	// (byRef), the reference each entry's series was appended under, in
	// entries' order: the next evaluation appends by it instead of
	// looking the labels up again. Nil otherwise. scope is the
	// Appendable they were returned by: only its appenders are handed
	// them.
	refs  []storage.SeriesRef
	scope *refScope
	// rule is the rule that wrote it.
	rule *rules.RecordingRule
	// logger is the group's, for stale markers written after the rule was
	// removed (Group.cleanupStaleSeries logs with it).
	logger *slog.Logger
}

// result is a recording rule's output, held from its QueryFunc call until
// Group.Eval appends its placeholder.
type result struct {
	vec   promql.Vector
	h     []uint64 // the hash of each sample's labels
	rule  *rules.RecordingRule
	index int // in the group, for the log lines Group.Eval writes
	group *rules.Group
}

func (r *result) logger() *slog.Logger {
	return r.group.Logger().With("name", r.rule.Name(), "index", r.index)
}

// iteration is one group evaluation run through EvalIterationFunc.
type iteration struct {
	tr  *Tracker
	g   *rules.Group
	key string

	mu    sync.Mutex // for next, taken and ids, should rules run concurrently
	next  int        // the next rule QueryFunc expects (rules run in order)
	taken []bool
	ids   []uint64 // results returned in this evaluation

	// delta (under tr.mu) is what prometheus_rule_group_last_evaluation_samples must add
	// to Group.Eval's count: each placeholder counts as its result's size.
	delta int
}

type iterationKey struct{}

// EvalIterationFunc wraps inner (rules.DefaultEvalIterationFunc when nil)
// so that the recording rules of the evaluation keep their state in the
// Tracker. Give the result to rules.Manager.Update, or call it in place of
// rules.DefaultEvalIterationFunc.
func (tr *Tracker) EvalIterationFunc(inner rules.GroupEvalIterationFunc) rules.GroupEvalIterationFunc {
	if inner == nil {
		inner = rules.DefaultEvalIterationFunc
	}
	return func(ctx context.Context, g *rules.Group, ts time.Time) {
		it := &iteration{tr: tr, g: g, key: rules.GroupKey(g.File(), g.Name())}
		tr.mu.Lock()
		tr.iters[it.key] = it
		tr.mu.Unlock()
		defer func() {
			tr.mu.Lock()
			if tr.iters[it.key] == it {
				delete(tr.iters, it.key)
			}
			// A result whose placeholder was never appended (the group
			// stopped mid-evaluation) is dropped.
			it.mu.Lock()
			for _, id := range it.ids {
				delete(tr.pending, id)
			}
			it.mu.Unlock()
			tr.mu.Unlock()
		}()
		inner(context.WithValue(ctx, iterationKey{}, it), g, ts)
	}
}

// claim returns the recording rule of the group whose query d is: the
// first not yet evaluated in this iteration with d's name and labels,
// looked for from the rule after the last one claimed (Group.Eval runs
// the rules in order).
func (it *iteration) claim(d rules.RuleDetail) (int, *rules.RecordingRule) {
	it.mu.Lock()
	defer it.mu.Unlock()
	rs := it.g.Rules()
	if it.taken == nil {
		it.taken = make([]bool, len(rs))
	}
	for k := range rs {
		i := (it.next + k) % len(rs)
		rr, ok := rs[i].(*rules.RecordingRule)
		if !ok || it.taken[i] || rr.Name() != d.Name || !labels.Equal(rr.Labels(), d.Labels) {
			continue
		}
		it.taken[i] = true
		it.next = i + 1
		return i, rr
	}
	return -1, nil
}

// QueryFunc wraps the group's query function. Within an evaluation run by
// EvalIterationFunc, a recording rule's result is kept by the Tracker and
// the rule gets a placeholder (package doc); any other query runs as inner
// runs it.
func (tr *Tracker) QueryFunc(inner rules.QueryFunc) rules.QueryFunc {
	return func(ctx context.Context, qs string, t time.Time) (promql.Vector, error) {
		it, _ := ctx.Value(iterationKey{}).(*iteration)
		if it == nil {
			return inner(ctx, qs, t)
		}
		d := rules.FromOriginContext(ctx)
		if d.Kind != rules.KindRecording {
			return inner(ctx, qs, t)
		}
		index, rr := it.claim(d)
		if rr == nil || rr.Labels().Has(PlaceholderLabel) {
			return inner(ctx, qs, t)
		}
		vec, err := inner(ctx, qs, t)
		if err != nil {
			return nil, err
		}
		tr.mu.Lock()
		prev := tr.last[rr]
		tr.mu.Unlock()
		// What RecordingRule.Eval does with the query's result; a series
		// the rule wrote last time keeps that label set, which the
		// storage holds, instead of a new copy.
		var (
			lb  = labels.NewBuilder(labels.EmptyLabels())
			sb  = labels.NewScratchBuilder(0)
			tmp labels.Labels
			hs  = make([]uint64, len(vec))
			sh  = labelshare.Finder{Src: tr.shared, Ctx: ctx}
		)
		defer sh.Close()
		for i := range vec {
			sample := &vec[i]
			lb.Reset(sample.Metric)
			lb.Set(model.MetricNameLabel, rr.Name())
			rr.Labels().Range(func(l labels.Label) {
				lb.Set(l.Name, l.Value)
			})
			sb.Reset()
			lb.Range(func(l labels.Label) { sb.Add(l.Name, l.Value) })
			sb.Sort()
			sb.Overwrite(&tmp) // valid until the next Overwrite
			hs[i] = tr.hash(tmp)
			if l, ok := prev.find(hs[i], tmp); ok {
				sample.Metric = l
			} else if l, ok := sh.Find(tmp); ok {
				sample.Metric = l
			} else {
				sample.Metric = tmp.Copy()
			}
		}
		if vec.ContainsSameLabelset() {
			return nil, rules.ErrDuplicateRecordingLabelSet
		}
		if limit := it.g.Limit(); limit > 0 && len(vec) > limit {
			return nil, fmt.Errorf("exceeded limit of %d with %d series", limit, len(vec))
		}
		tr.mu.Lock()
		tr.lastID++
		id := tr.lastID
		tr.pending[id] = &result{vec: vec, h: hs, rule: rr, index: index, group: it.g}
		it.delta += len(vec) - 1
		tr.mu.Unlock()
		it.mu.Lock()
		it.ids = append(it.ids, id)
		it.mu.Unlock()
		return promql.Vector{{
			T:      timestamp.FromTime(t),
			Metric: labels.FromStrings(PlaceholderLabel, strconv.FormatUint(id, 10)),
		}}, nil
	}
}

// Appendable wraps the groups' appendable: placeholders are replaced by the
// results and stale markers they stand for; everything else is appended as
// it comes.
func (tr *Tracker) Appendable(inner storage.AppendableV2) storage.AppendableV2 {
	return appendable{tr: tr, inner: inner, scope: &refScope{}}
}

type appendable struct {
	tr    *Tracker
	inner storage.AppendableV2
	scope *refScope
}

// refScope tells apart the Appendables of one Tracker: a reference one
// storage returned means nothing to another.
type refScope struct{ _ byte }

func (a appendable) AppenderV2(ctx context.Context) storage.AppenderV2 {
	app := a.inner.AppenderV2(ctx)
	_, byRef := app.(storage.GetRef)
	return &appender{tr: a.tr, app: app, byRef: byRef, scope: a.scope}
}

type appender struct {
	tr   *Tracker
	app  storage.AppenderV2
	adds []addition
	ends []ending
	// byRef is set when app resolves series references (it implements
	// storage.GetRef, as the raw tier's and the rollup tee's appenders
	// do): the series a rule wrote last time are appended by the
	// reference app returned then, which the head finds by id instead of
	// hashing and comparing the labels. An appender that ignores
	// references (the diagnosis engine's scratch store) keeps none, and no
	// bytes for them.
	byRef bool
	scope *refScope
}

// addition is a placeholder appended: its result is written at Commit.
type addition struct {
	id   uint64
	res  *result
	opts storage.AppendV2Options
}

// ending is a placeholder staled: the series of its set that no addition
// of the same transaction writes get a stale marker at t.
type ending struct {
	id      uint64
	set     *seriesSet
	t       int64
	opts    storage.AppendV2Options
	matched []uint64 // bitset over set.entries: written again
}

func placeholderID(ls labels.Labels) (uint64, bool) {
	v := ls.Get(PlaceholderLabel)
	if v == "" {
		return 0, false
	}
	id, err := strconv.ParseUint(v, 10, 64)
	return id, err == nil
}

func (a *appender) Append(ref storage.SeriesRef, ls labels.Labels, st, t int64, v float64, h *histogram.Histogram, fh *histogram.FloatHistogram, o storage.AppendV2Options) (storage.SeriesRef, error) {
	if id, ok := placeholderID(ls); ok {
		a.tr.mu.Lock()
		res, pending := a.tr.pending[id]
		set, committed := a.tr.sets[id]
		if pending {
			delete(a.tr.pending, id)
		}
		a.tr.mu.Unlock()
		switch {
		case pending && !value.IsStaleNaN(v):
			a.adds = append(a.adds, addition{id: id, res: res, opts: o})
			return 0, nil
		case committed && value.IsStaleNaN(v) && h == nil && fh == nil:
			a.ends = append(a.ends, ending{id: id, set: set, t: t, opts: o, matched: make([]uint64, (len(set.entries)+63)/64)})
			return 0, nil
		case pending || committed:
			// Neither a result's first append nor a stale marker: not
			// something Group.Eval does.
			return 0, fmt.Errorf("rule state placeholder %d appended out of turn", id)
		}
		// No id of ours (a set is staled once: Group.CopyState hands each
		// rule's series to one place): a series that carries the label.
	}
	return a.app.Append(ref, ls, st, t, v, h, fh, o)
}

func (a *appender) Commit() error {
	made := make([]*seriesSet, len(a.adds))
	for i := range a.adds {
		made[i] = a.write(&a.adds[i])
	}
	for i := range a.ends {
		a.stale(&a.ends[i], len(a.adds) > 0)
	}
	if err := a.app.Commit(); err != nil {
		// Group.Eval keeps the previous evaluation's series (and
		// cleanupStaleSeries its list) when the commit fails.
		return err
	}
	a.tr.mu.Lock()
	for i, ad := range a.adds {
		a.tr.sets[ad.id] = made[i]
		a.tr.last[ad.res.rule] = made[i]
	}
	for _, e := range a.ends {
		delete(a.tr.sets, e.id)
		if a.tr.last[e.set.rule] == e.set {
			delete(a.tr.last, e.set.rule)
		}
	}
	a.tr.mu.Unlock()
	return nil
}

func (a *appender) Rollback() error {
	return a.app.Rollback()
}

// write appends a result's samples as Group.Eval appends a rule's vector,
// and returns the series written. A series that an ending's set holds is
// appended with that set's labels (the same label set, which the storage
// already keeps), and marked there as written again.
func (a *appender) write(ad *addition) *seriesSet {
	var (
		res           = ad.res
		rule          = res.rule
		vec           = res.vec
		logger        *slog.Logger
		numOutOfOrder = 0
		numTooOld     = 0
		numDuplicates = 0
	)
	log := func() *slog.Logger {
		if logger == nil {
			logger = res.logger()
		}
		return logger
	}
	// The samples by hash, and for each ending the index in its set of
	// each sample's series (-1: not there), by one merge of the two
	// sorted lists.
	order := make([]ref, len(vec))
	for i := range vec {
		order[i] = ref{h: res.h[i], i: int32(i)}
	}
	slices.SortFunc(order, func(x, y ref) int {
		switch {
		case x.h < y.h:
			return -1
		case x.h > y.h:
			return 1
		}
		return 0
	})
	at := make([][]int32, len(a.ends))
	for k := range a.ends {
		at[k] = a.ends[k].set.match(order, vec)
	}
	ok := make([]uint64, (len(vec)+63)/64)
	var refs []storage.SeriesRef // by sample, when byRef
	if a.byRef {
		refs = make([]storage.SeriesRef, len(vec))
	}
	for i, s := range vec {
		lset, ref := a.seriesFor(at, vec, i)
		ref, err := a.app.Append(ref, lset, 0, s.T, s.F, nil, s.H, ad.opts)
		if err != nil {
			rule.SetHealth(rules.HealthBad)
			rule.SetLastError(err)
			unwrappedErr := errors.Unwrap(err)
			if unwrappedErr == nil {
				unwrappedErr = err
			}
			switch {
			case errors.Is(unwrappedErr, storage.ErrOutOfOrderSample):
				numOutOfOrder++
				log().Debug("Rule evaluation result discarded", "err", err, "sample", s)
			case errors.Is(unwrappedErr, storage.ErrTooOldSample):
				numTooOld++
				log().Debug("Rule evaluation result discarded", "err", err, "sample", s)
			case errors.Is(unwrappedErr, storage.ErrDuplicateSampleForTimestamp):
				numDuplicates++
				log().Debug("Rule evaluation result discarded", "err", err, "sample", s)
			default:
				log().Warn("Rule evaluation result discarded", "err", err, "sample", s)
			}
			continue
		}
		ok[i/64] |= 1 << (i % 64)
		if refs != nil {
			refs[i] = ref
		}
		for k := range at {
			if j := at[k][i]; j >= 0 {
				a.ends[k].matched[j/64] |= 1 << (j % 64)
			}
		}
	}
	if numOutOfOrder > 0 {
		log().Warn("Error on ingesting out-of-order result from rule evaluation", "num_dropped", numOutOfOrder)
	}
	if numTooOld > 0 {
		log().Warn("Error on ingesting too old result from rule evaluation", "num_dropped", numTooOld)
	}
	if numDuplicates > 0 {
		log().Warn("Error on ingesting results from rule evaluation with different value but same timestamp", "num_dropped", numDuplicates)
	}
	// The series written, in hash order, each with the labels it was
	// appended with.
	n := 0
	for _, w := range ok {
		n += bits.OnesCount64(w)
	}
	set := &seriesSet{entries: make([]entry, 0, n), logger: res.group.Logger(), rule: rule}
	if refs != nil {
		set.refs, set.scope = make([]storage.SeriesRef, 0, n), a.scope
	}
	for _, r := range order {
		if ok[r.i/64]&(1<<(r.i%64)) == 0 {
			continue
		}
		lset, _ := a.seriesFor(at, vec, int(r.i))
		set.entries = append(set.entries, entry{h: r.h, l: lset})
		if refs != nil {
			set.refs = append(set.refs, refs[r.i])
		}
	}
	return set
}

// seriesFor returns the labels sample i of vec is appended with, and the
// reference to append it by (0: none): those an ending's set holds for its
// series (at: write's match of vec against each ending's set), else its
// own labels.
func (a *appender) seriesFor(at [][]int32, vec promql.Vector, i int) (labels.Labels, storage.SeriesRef) {
	for k := range at {
		if j := at[k][i]; j >= 0 {
			set := a.ends[k].set
			return set.entries[j].l, a.ref(set, int(j))
		}
	}
	return vec[i].Metric, 0
}

// ref is the reference entry j of s was appended under, if a's appendable
// returned it; else 0.
func (a *appender) ref(s *seriesSet, j int) storage.SeriesRef {
	if s.refs == nil || s.scope != a.scope {
		return 0
	}
	return s.refs[j]
}

// find returns the label set of s equal to l, whose hash is h (s may be
// nil).
func (s *seriesSet) find(h uint64, l labels.Labels) (labels.Labels, bool) {
	if s == nil {
		return labels.EmptyLabels(), false
	}
	j, _ := slices.BinarySearchFunc(s.entries, h, func(e entry, h uint64) int { return cmp.Compare(e.h, h) })
	for ; j < len(s.entries) && s.entries[j].h == h; j++ {
		if labels.Equal(s.entries[j].l, l) {
			return s.entries[j].l, true
		}
	}
	return labels.EmptyLabels(), false
}

// ref is a sample of a result: its labels' hash and its index.
type ref struct {
	h uint64
	i int32
}

// match returns, for each sample of vec, the index of its series in s, or
// -1; order is vec's samples sorted by hash.
func (s *seriesSet) match(order []ref, vec promql.Vector) []int32 {
	at := make([]int32, len(vec))
	for i := range at {
		at[i] = -1
	}
	es := s.entries
	q := 0
	for p := 0; p < len(order) && q < len(es); {
		h := order[p].h
		switch {
		case h < es[q].h:
			p++
		case h > es[q].h:
			q++
		default:
			// Every sample with this hash against every entry with it
			// (more than one of either only on a hash collision).
			end := q
			for end < len(es) && es[end].h == h {
				end++
			}
			for ; p < len(order) && order[p].h == h; p++ {
				l := vec[order[p].i].Metric
				for j := q; j < end; j++ {
					if labels.Equal(es[j].l, l) {
						at[order[p].i] = int32(j)
						break
					}
				}
			}
			q = end
		}
	}
	return at
}

// stale writes a stale marker for each series of e's set that this
// transaction did not write again: after a rule's evaluation (eval: its
// previous series), or for a rule removed (its last series), with the
// error handling and log lines of Group.Eval and Group.cleanupStaleSeries.
func (a *appender) stale(e *ending, eval bool) {
	var logger *slog.Logger
	for j, en := range e.set.entries {
		if e.matched[j/64]&(1<<(j%64)) != 0 {
			continue
		}
		_, err := a.app.Append(a.ref(e.set, j), en.l, 0, e.t, math.Float64frombits(value.StaleNaN), nil, nil, e.opts)
		unwrappedErr := errors.Unwrap(err)
		if unwrappedErr == nil {
			unwrappedErr = err
		}
		switch {
		case unwrappedErr == nil:
		case errors.Is(unwrappedErr, storage.ErrOutOfOrderSample),
			errors.Is(unwrappedErr, storage.ErrTooOldSample),
			errors.Is(unwrappedErr, storage.ErrDuplicateSampleForTimestamp):
			// Expected if the series is exposed from a different rule.
		case eval:
			if logger == nil {
				logger = a.adds[0].res.logger()
			}
			logger.Warn("Adding stale sample failed", "sample", en.l.String(), "err", err)
		default:
			e.set.logger.Warn("Adding stale sample for previous configuration failed", "sample", en.l, "err", err)
		}
	}
}
