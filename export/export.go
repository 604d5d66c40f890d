package export

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"

	"github.com/strata-dev/strata/tiers"
)

// Tier is a rollup tier as an export reads it; *tiers.Rollup is one.
type Tier interface {
	// SelectFields returns the matching series with their windows starting
	// in [mint, maxt], sorted by labels, with at least fields (and Start
	// and LastT) read.
	SelectFields(ctx context.Context, mint, maxt int64, fields tiers.WindowFields, ms ...*labels.Matcher) ([]tiers.SeriesWindows, error)
	// SelectLabels returns the label sets of the matching series with
	// windows in partitions overlapping [mint, maxt].
	SelectLabels(ctx context.Context, mint, maxt int64, ms ...*labels.Matcher) ([]labels.Labels, error)
	Partitions() []tiers.PartitionInfo
	Config() tiers.RollupConfig
}

// Config is what an Exporter reads.
type Config struct {
	// Minute and Hour are the rollup tiers; either may be nil.
	Minute, Hour Tier
	// Typing decides each metric's kind (kind.go).
	Typing Typing
	// Engine and Queryable evaluate PromQL expressions (Queryable: the
	// rollup tiers as PromQL reads them, tiers.NewStitched). Without them
	// a request with an expression is refused.
	Engine    promql.QueryEngine
	Queryable storage.Queryable
	// MaxSteps bounds the steps of one export (0: 100,000, eleven years of
	// hours).
	MaxSteps int
	// ChunkWindows bounds one read of a tier, in windows per series (0:
	// 168, a week of hour windows; the minute tier reads at most 360
	// minutes): what an export holds besides the open steps' statistics.
	ChunkWindows int
	// ReadWindows bounds one read of a tier over all its series (0: 1 Mi
	// windows, about 100 MB): where a selector matches many series, a read
	// covers fewer windows per series than ChunkWindows, down to
	// minChunkWindows. Reads are minChunkWindows long until a selector has
	// found a series; each next one is sized by the most series a read has
	// returned.
	ReadWindows int
}

// minChunkWindows is the fewest windows per series a read covers.
const minChunkWindows = 6

// Exporter plans and runs exports. It is safe for concurrent use.
type Exporter struct{ cfg Config }

// New returns an Exporter over cfg's tiers.
func New(cfg Config) *Exporter {
	if cfg.MaxSteps <= 0 {
		cfg.MaxSteps = 100_000
	}
	if cfg.ChunkWindows <= 0 {
		cfg.ChunkWindows = 168
	}
	if cfg.ReadWindows <= 0 {
		cfg.ReadWindows = 1 << 20
	}
	return &Exporter{cfg: cfg}
}

// tierInfo is one tier's name, resolution and the ranges its partitions hold.
type tierInfo struct {
	name  string
	src   Tier
	res   int64
	parts []span // merged, ascending
}

func (t *tierInfo) covered(s span) int64 {
	var n int64
	for _, p := range t.parts {
		lo, hi := max(p.start, s.start), min(p.end, s.end)
		if lo < hi {
			n += hi - lo
		}
	}
	return n
}

func (t *tierInfo) describe() string {
	if len(t.parts) == 0 {
		return fmt.Sprintf("the %s tier holds nothing", t.name)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the %s tier holds ", t.name)
	for i, p := range t.parts {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s to %s", fmtTime(p.start), fmtTime(p.end))
	}
	return b.String()
}

func fmtTime(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339) }

func newTierInfo(name string, src Tier) *tierInfo {
	if src == nil {
		return nil
	}
	t := &tierInfo{name: name, src: src, res: src.Config().Resolution.Milliseconds()}
	for _, p := range src.Partitions() {
		if n := len(t.parts); n > 0 && t.parts[n-1].end == p.Start {
			t.parts[n-1].end = p.End
			continue
		}
		t.parts = append(t.parts, span{p.Start, p.End})
	}
	return t
}

// Plan is a validated export: its columns are known and Run writes its rows.
type Plan struct {
	e       *Exporter
	req     Request
	queries []*query
	steps   []span
	tiers   []*tierInfo // per step
	avail   []*tierInfo // the tiers there are
	columns []Column
	// groups known before running (from the selectors' series), sorted.
	groups []groupKey
	// groupCols name the group's columns (req.By, or the preset's);
	// groupOf gives a series' group (false: the series is left out).
	groupCols []string
	groupOf   func(labels.Labels) (groupKey, bool)
}

// groupKey is the group-by labels' values joined by \xff.
type groupKey string

func (g groupKey) values(n int) []string {
	if n == 0 {
		return nil
	}
	return strings.Split(string(g), "\xff")
}

func keyOf(l labels.Labels, by []string) groupKey {
	if len(by) == 0 {
		return ""
	}
	vals := make([]string, len(by))
	for i, b := range by {
		vals[i] = l.Get(b)
	}
	return groupKey(strings.Join(vals, "\xff"))
}

// Plan checks req against the tiers: the step against the tier holding
// each part of the range, the range against what the tiers hold, every
// selector and group-by label against the series there. The errors wrap
// ErrBadRequest and say what the tiers hold.
func (e *Exporter) Plan(ctx context.Context, req Request) (*Plan, error) {
	if req.Preset != "" {
		return nil, fmt.Errorf("%w: preset %q is run by Capacity, not Plan", ErrBadRequest, req.Preset)
	}
	if !req.To.After(req.From) {
		return nil, fmt.Errorf("%w: --to (%s) must be after --from (%s)", ErrBadRequest, req.To.Format(time.RFC3339), req.From.Format(time.RFC3339))
	}
	if err := checkBy(req.By); err != nil {
		return nil, err
	}
	st, err := parseStep(req.Step, req.Location)
	if err != nil {
		return nil, err
	}
	qs, err := parseQueries(req.Queries)
	if err != nil {
		return nil, err
	}
	return e.plan(ctx, req, st, qs, req.By, nil)
}

// plan is Plan with the queries parsed and, for the preset, its own groups.
func (e *Exporter) plan(ctx context.Context, req Request, st stepper, qs []*query, groupCols []string, groupOf func(labels.Labels) (groupKey, bool)) (*Plan, error) {
	if groupOf == nil {
		by := req.By
		groupOf = func(l labels.Labels) (groupKey, bool) { return keyOf(l, by), true }
	}
	p := &Plan{e: e, req: req, queries: qs, steps: st.steps(req.From.UnixMilli(), req.To.UnixMilli()), groupCols: groupCols, groupOf: groupOf}
	if len(p.steps) > e.cfg.MaxSteps {
		return nil, fmt.Errorf("%w: %d steps of %s, more than %d: use a coarser step or a shorter range", ErrBadRequest, len(p.steps), req.Step, e.cfg.MaxSteps)
	}
	if err := p.chooseTiers(st); err != nil {
		return nil, err
	}
	for _, q := range p.queries {
		if q.expr != nil && (e.cfg.Engine == nil || e.cfg.Queryable == nil) {
			return nil, fmt.Errorf("%w: %q: this export cannot evaluate PromQL expressions", ErrBadRequest, q.text)
		}
	}
	if err := p.resolveSeries(ctx); err != nil {
		return nil, err
	}
	p.columns = p.makeColumns()
	return p, nil
}

// chooseTiers gives each step the tier that serves it: the minute tier
// when its partitions cover the whole step, else the hour tier when its
// do, else whichever covers more of it (the coverage column shows the
// rest). A step must be a whole number of its tier's windows.
func (p *Plan) chooseTiers(st stepper) error {
	minute, hour := newTierInfo(tiers.TierMinute, p.e.cfg.Minute), newTierInfo(tiers.TierHour, p.e.cfg.Hour)
	var avail []*tierInfo
	for _, t := range []*tierInfo{minute, hour} {
		if t != nil {
			avail = append(avail, t)
		}
	}
	p.avail = avail
	held := func() string {
		var parts []string
		for _, t := range avail {
			parts = append(parts, t.describe())
		}
		if len(parts) == 0 {
			return "no rollup tier is configured"
		}
		return strings.Join(parts, "; ")
	}
	p.tiers = make([]*tierInfo, len(p.steps))
	anyData := false
	for i, s := range p.steps {
		var best *tierInfo
		var bestN int64
		for _, t := range avail {
			n := t.covered(s)
			if n == s.end-s.start {
				best, bestN = t, n
				break
			}
			if n > bestN {
				best, bestN = t, n
			}
		}
		if best == nil {
			// Nothing holds this step: serve it from the tier nearest in
			// resolution that could (its rows say coverage 0).
			if len(avail) == 0 {
				return fmt.Errorf("%w: %s", ErrOutOfRange, held())
			}
			best = avail[len(avail)-1]
			for _, t := range avail {
				if st.minLength() >= t.res && (s.end-s.start)%t.res == 0 {
					best = t
					break
				}
			}
		} else {
			anyData = true
		}
		if s.end-s.start < best.res || (st.fixed > 0 && st.fixed%best.res != 0) {
			return fmt.Errorf("%w: step %s is finer than the %s tier's %s windows that hold %s to %s (%s)",
				ErrStepTooFine, p.req.Step, best.name, time.Duration(best.res)*time.Millisecond, fmtTime(s.start), fmtTime(s.end), held())
		}
		p.tiers[i] = best
	}
	if !anyData {
		return fmt.Errorf("%w: nothing is held from %s to %s: %s", ErrOutOfRange, fmtTime(p.steps[0].start), fmtTime(p.steps[len(p.steps)-1].end), held())
	}
	return nil
}

// resolveSeries finds each selector's series (and kind), the groups, and
// checks the group-by labels.
func (p *Plan) resolveSeries(ctx context.Context) error {
	lo, hi := p.steps[0].start, p.steps[len(p.steps)-1].end-1
	used := map[*tierInfo]bool{}
	for _, t := range p.tiers {
		used[t] = true
	}
	groups := map[groupKey]bool{}
	labelSeen := map[string]bool{}
	anySelector := false
	for _, q := range p.queries {
		if q.expr != nil {
			continue
		}
		anySelector = true
		q.kind = p.e.cfg.Typing.kindOf(q.name)
		find := func(ms []*labels.Matcher) ([]labels.Labels, error) {
			var out []labels.Labels
			for t := range used {
				ls, err := t.src.SelectLabels(ctx, lo, hi, ms...)
				if err != nil {
					return nil, fmt.Errorf("export %s: %w", q.text, err)
				}
				out = append(out, ls...)
			}
			return out, nil
		}
		series, err := find(q.matchers)
		if err != nil {
			return err
		}
		if len(series) == 0 && q.kind != KindHistogram {
			// A histogram's family name: its _bucket series.
			bucket := withName(q.matchers, q.name+"_bucket")
			if bs, err := find(bucket); err != nil {
				return err
			} else if len(bs) > 0 {
				q.matchers, q.name, q.kind, series = bucket, q.name+"_bucket", KindHistogram, bs
			}
		}
		if len(series) == 0 && q.optional {
			continue
		}
		if len(series) == 0 {
			all, err := find(withName(nil, q.name))
			if err != nil {
				return err
			}
			if len(all) == 0 {
				return fmt.Errorf("%w: no series named %s from %s to %s", ErrUnknownSelector, q.name, fmtTime(lo), fmtTime(hi+1))
			}
			return fmt.Errorf("%w: %s matches none of the %d series of %s from %s to %s", ErrEmpty, q.text, len(all), q.name, fmtTime(lo), fmtTime(hi+1))
		}
		if q.kind == KindHistogram && !slices.ContainsFunc(series, func(l labels.Labels) bool { return l.Has(model.BucketLabel) }) {
			q.kind = KindCounter // a _bucket name without buckets: only its own increase
		}
		for _, l := range series {
			if g, ok := p.groupOf(l); ok {
				groups[g] = true
			}
			for _, b := range p.req.By {
				if l.Has(b) {
					labelSeen[b] = true
				}
			}
		}
	}
	if anySelector && p.req.Preset == "" {
		for _, b := range p.req.By {
			if !labelSeen[b] {
				return fmt.Errorf("%w: no selected series has label %q", ErrUnknownLabel, b)
			}
		}
	}
	for g := range groups {
		p.groups = append(p.groups, g)
	}
	slices.Sort(p.groups)
	return nil
}

func withName(ms []*labels.Matcher, name string) []*labels.Matcher {
	out := []*labels.Matcher{labels.MustNewMatcher(labels.MatchEqual, model.MetricNameLabel, name)}
	for _, m := range ms {
		if m.Name != model.MetricNameLabel {
			out = append(out, m)
		}
	}
	return out
}

// primeOrder is t, then the plan's other tiers.
func (p *Plan) primeOrder(t *tierInfo) []*tierInfo {
	out := []*tierInfo{t}
	for _, o := range p.avail {
		if o.name != t.name {
			out = append(out, o)
		}
	}
	return out
}

// Columns returns the table's columns, in order.
func (p *Plan) Columns() []Column { return p.columns }

// Steps returns how many steps the export has (for progress).
func (p *Plan) Steps() int { return len(p.steps) }

// chunkLength bounds how much of a tier one read holds in memory: by
// default a week of hour windows, six hours of minute windows (for 1,000
// series: ~17 MB and ~35 MB of windows), fewer where the most series a
// selector's read has returned so far (series) would hold more than
// Config.ReadWindows: at 100,000 series, 10 windows a series (about 100
// MB), where a week of hours would be 1.7 GB. Until a selector has found a
// series, reads are minChunkWindows long. A plan of expressions alone is
// read ChunkWindows at a time: the PromQL engine's sample limit bounds it.
func (p *Plan) chunkLength(res int64, series int) int64 {
	n := int64(p.e.cfg.ChunkWindows)
	if res < time.Hour.Milliseconds() {
		n = min(n, 360)
	}
	if !p.selectors() {
		return n * res
	}
	if series == 0 {
		return min(n, minChunkWindows) * res
	}
	return min(n, max(minChunkWindows, int64(p.e.cfg.ReadWindows/series))) * res
}

// selectors reports whether a query of the plan is a series selector.
func (p *Plan) selectors() bool {
	for _, q := range p.queries {
		if q.expr == nil {
			return true
		}
	}
	return false
}

// statsOf returns the statistic columns of a query, after its _series and
// _coverage columns (docs/format/export.md).
func statsOf(q *query) []Column {
	unit := "the metric's unit"
	if q.expr != nil || q.kind == KindGauge {
		return []Column{
			{Name: "avg", Unit: unit, Help: "mean of every sample in the step (sum of sums / sum of counts)"},
			{Name: "min", Unit: unit, Help: "smallest sample"},
			{Name: "max", Unit: unit, Help: "largest sample"},
			{Name: "p50", Unit: unit, Help: "median of the window averages (minute or hour)"},
			{Name: "p95", Unit: unit, Help: "95th percentile of the window averages"},
			{Name: "p99", Unit: unit, Help: "99th percentile of the window averages"},
			{Name: "last", Unit: unit, Help: "mean over the group's series of each one's last sample in the step"},
		}
	}
	if q.kind == KindCounter {
		cols := []Column{
			{Name: "increase", Unit: "the counter's unit", Help: "reset-aware increase over the step, summed over the group's series"},
			{Name: "rate", Unit: "the counter's unit per second", Help: "increase / the step's length in seconds"},
		}
		if q.slotPeak {
			cols = append(cols, Column{Name: "peak_rate", Unit: "the counter's unit per second", Help: "the largest rate of one window (minute or hour), summed over the group's series"})
		}
		return cols
	}
	unit = "the histogram's unit (le)"
	return []Column{
		{Name: "p50", Unit: unit, Help: "median from the buckets' increases (histogram_quantile)"},
		{Name: "p95", Unit: unit, Help: "95th percentile from the buckets' increases"},
		{Name: "p99", Unit: unit, Help: "99th percentile from the buckets' increases"},
		{Name: "count", Unit: "observations", Help: "observations in the step (increase of the +Inf bucket)"},
	}
}

func (p *Plan) makeColumns() []Column {
	var cols []Column
	for _, b := range p.groupCols {
		cols = append(cols, Column{Name: b, Type: ColString, Help: "group-by label (empty where a series lacks it)"})
	}
	cols = append(cols,
		Column{Name: "step_start", Type: ColTime, Help: "start of the step"},
		Column{Name: "step_end", Type: ColTime, Help: "end of the step (exclusive)"},
		Column{Name: "tier", Type: ColString, Help: "the rollup tier that served the step: minute or hour"})
	for _, q := range p.queries {
		cols = append(cols,
			Column{Name: q.alias + "_series", Type: ColInt, Unit: "series", Help: "series of the group with data in the step"},
			Column{Name: q.alias + "_coverage", Type: ColFloat, Unit: "fraction 0-1", Help: "windows with data / (series x windows in the step)"})
		for _, c := range statsOf(q) {
			c.Name = q.alias + "_" + c.Name
			c.Type = ColFloat
			cols = append(cols, c)
		}
	}
	return cols
}
