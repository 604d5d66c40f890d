package diagnose

import (
	"context"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/rules"
	"gopkg.in/yaml.v3"
)

// scope says which alerts a causal edge may link.
type scope int

const (
	scopeEntity scope = iota // the same pod, GPU (host+index) or GPU UUID
	scopeHost                // the same host
	scopeModel               // the same served model (load moves to its other replicas)
)

type edge struct {
	to    string // a cause, or "symptom:<kind>"
	scope scope
}

// causalGraph says which cause can produce which other cause's signature
// and which symptoms (docs/diagnosis.md, "Causal graph"). A firing cause
// explained by another firing cause is listed as a symptom of that root.
func causalGraph() map[string][]edge {
	latency := func(s scope, kinds ...string) []edge {
		out := make([]edge, len(kinds))
		for i, k := range kinds {
			out[i] = edge{"symptom:" + k, s}
		}
		return out
	}
	slowCompute := append([]edge{{"request_queue_backlog", scopeEntity}}, latency(scopeEntity, "ttft", "tpot", "e2e", "errors")...)
	return map[string][]edge{
		"thermal_throttle":        slowCompute,
		"power_cap":               slowCompute,
		"kv_cache_eviction_storm": append([]edge{{"request_queue_backlog", scopeEntity}, {"prefix_cache_collapse", scopeEntity}}, latency(scopeEntity, "ttft", "tpot", "e2e", "errors")...),
		"request_queue_backlog":   latency(scopeEntity, "ttft", "e2e", "errors"),
		"under_batched_gpu":       append([]edge{{"request_queue_backlog", scopeEntity}}, latency(scopeEntity, "ttft", "e2e", "errors")...),
		"draft_model_drift":       append([]edge{{"request_queue_backlog", scopeEntity}}, latency(scopeEntity, "tpot", "e2e")...),
		"prefix_cache_collapse":   append([]edge{{"request_queue_backlog", scopeEntity}}, latency(scopeEntity, "ttft", "e2e")...),
		"xid_gpu_lost": append([]edge{{"request_queue_backlog", scopeModel}, {"kv_cache_eviction_storm", scopeModel}},
			latency(scopeModel, "ttft", "tpot", "e2e", "errors")...),
		"network_delay": latency(scopeHost, "ttft", "e2e", "errors"),
	}
}

// alertInfo is one active rule alert as the assembly sees it.
type alertInfo struct {
	key       string // rule name and labels: identifies the alert
	rule      string
	typ       string // cause or symptom
	cause     string // diagnosis label of a cause rule
	symptom   string // symptom label of a symptom rule (ttft, tpot, e2e, errors)
	severity  string
	dimension string
	lbls      labels.Labels
	ann       labels.Labels
	active    time.Time
	state     rules.AlertState
	ent       Entities
}

func entitiesOf(l labels.Labels) Entities {
	first := func(names ...string) string {
		for _, n := range names {
			if v := l.Get(n); v != "" {
				return v
			}
		}
		return ""
	}
	e := Entities{
		Model: first("model_name", "model"), Namespace: l.Get("namespace"), Pod: l.Get("pod"),
		Instance: l.Get("instance"), Host: first("hostname", "Hostname", "host", "node"), GPU: l.Get("gpu"), UUID: first("UUID", "uuid"),
	}
	if e.Host == "" && e.Instance != "" {
		e.Host = e.Instance
		if i := strings.LastIndexByte(e.Host, ':'); i > 0 {
			e.Host = e.Host[:i]
		}
	}
	return e
}

func sameEntity(a, b Entities) bool {
	switch {
	case a.SameReplica(b):
		return true
	case a.UUID != "" && a.UUID == b.UUID:
		return true
	case a.GPU != "" && a.Host != "" && a.GPU == b.GPU && a.Host == b.Host:
		return true
	}
	return false
}

func inScope(s scope, a, b Entities) bool {
	switch s {
	case scopeHost:
		return a.Host != "" && a.Host == b.Host
	case scopeModel:
		return (a.Model != "" && a.Model == b.Model) || sameEntity(a, b)
	}
	return sameEntity(a, b)
}

// explains reports whether cause alert r can produce alert x.
func explains(g map[string][]edge, r, x *alertInfo) bool {
	target := x.cause
	if x.typ == "symptom" {
		target = "symptom:" + x.symptom
	}
	for _, ed := range g[r.cause] {
		if ed.to == target && inScope(ed.scope, r.ent, x.ent) {
			return true
		}
	}
	// Any cause explains an unclassified symptom on its own entity.
	return x.typ == "symptom" && x.symptom == "" && sameEntity(r.ent, x.ent)
}

// incident is an open diagnosis and what the assembly keeps between minutes.
type incident struct {
	d        Diagnosis
	root     string     // alert key of the root
	members  []string   // alert keys of the symptoms listed
	rootInfo *alertInfo // the root alert as last seen
	evidence []evidenceSpec
	peaks    []float64
	bases    []evidenceBase // the baseline of each evidence item at its peak
	fp       Fingerprint
}

// evidenceBase is the baseline an evidence item's peak is compared with.
type evidenceBase struct {
	med, sig float64
	src      baselineSource
	ok       bool
}

// deviation is how far v is beyond the baseline in the direction of op
// ("<" items deviate downwards), in sigma.
func (b evidenceBase) deviation(op string, v float64) float64 {
	d := (v - b.med) / b.sig
	if strings.HasPrefix(op, "<") {
		return -d
	}
	return d
}

type evidenceSpec struct {
	Metric    string   `yaml:"metric"`
	Query     string   `yaml:"query"`
	Op        string   `yaml:"op"`
	Threshold *float64 `yaml:"threshold"`
}

// incidents tracks the open diagnoses across minutes.
type incidents struct {
	e       *Engine
	graph   map[string][]edge
	open    map[string]*incident // by root key
	dropped []string             // ids superseded at the last minute
}

func newIncidents(e *Engine) *incidents {
	return &incidents{e: e, graph: causalGraph(), open: map[string]*incident{}}
}

// supersedeWindow: a diagnosis whose root becomes explained by a cause that
// began at most this long after it opened is dropped (it was the first sign
// of that cause), instead of being reported as an incident of its own.
const supersedeWindow = 15 * time.Minute

func (in *incidents) collect() []*alertInfo {
	var out []*alertInfo
	for _, g := range in.e.groups {
		for _, ar := range g.AlertingRules() {
			for _, a := range ar.ActiveAlerts() {
				typ := a.Labels.Get("alert_type")
				if typ != "cause" && typ != "symptom" {
					continue
				}
				out = append(out, &alertInfo{
					key: ar.Name() + a.Labels.String(), rule: ar.Name(), typ: typ,
					cause: a.Labels.Get("diagnosis"), symptom: a.Labels.Get("symptom"),
					severity: a.Labels.Get("severity"), dimension: a.Labels.Get("dimension"),
					lbls: a.Labels, ann: a.Annotations, active: a.ActiveAt, state: a.State, ent: entitiesOf(a.Labels),
				})
			}
		}
	}
	slices.SortFunc(out, func(a, b *alertInfo) int {
		if c := a.active.Compare(b.active); c != 0 {
			return c
		}
		return strings.Compare(a.key, b.key)
	})
	return out
}

// assemble turns the alerts active after minute t into diagnoses and
// returns those that opened, changed or resolved.
func (in *incidents) assemble(ctx context.Context, t time.Time) []Diagnosis {
	all := in.collect()
	var causes, symptoms []*alertInfo
	for _, a := range all {
		if a.state != rules.StateFiring {
			continue
		}
		if a.typ == "cause" {
			causes = append(causes, a)
		} else {
			symptoms = append(symptoms, a)
		}
	}
	// Roots: firing causes no other firing cause explains. A mutual
	// explanation (only possible with operator rules) goes to the earlier.
	explainer := map[*alertInfo]*alertInfo{}
	for _, c := range causes {
		for _, d := range causes {
			if d != c && explains(in.graph, d, c) && (!explains(in.graph, c, d) || d.active.Before(c.active)) {
				explainer[c] = d
				break
			}
		}
	}
	var groups []*rootGroup
	byRoot := map[*alertInfo]*rootGroup{}
	for _, c := range causes {
		if explainer[c] == nil {
			g := &rootGroup{root: c}
			groups = append(groups, g)
			byRoot[c] = g
		}
	}
	rootOf := func(c *alertInfo) *alertInfo {
		for i := 0; explainer[c] != nil && i < len(causes); i++ {
			c = explainer[c]
		}
		return c
	}
	for _, c := range causes {
		if explainer[c] != nil {
			if g := byRoot[rootOf(c)]; g != nil {
				g.members = append(g.members, c)
			}
		}
	}
	var unexplained []*alertInfo
	for _, s := range symptoms {
		var owner *rootGroup
		for _, g := range groups {
			if explains(in.graph, g.root, s) {
				owner = g
				break
			}
		}
		if owner == nil {
			// A symptom on the entity of an explained cause belongs to its root.
			for _, g := range groups {
				for _, m := range g.members {
					if explains(in.graph, m, s) {
						owner = g
					}
				}
			}
		}
		if owner != nil {
			owner.members = append(owner.members, s)
		} else {
			unexplained = append(unexplained, s)
		}
	}
	// Unexplained symptoms of one entity make one "cause unknown" diagnosis.
	for _, s := range unexplained {
		var owner *rootGroup
		for _, g := range groups {
			if g.root.typ == "symptom" && sameEntity(g.root.ent, s.ent) {
				owner = g
				break
			}
		}
		if owner == nil {
			owner = &rootGroup{root: s}
			groups = append(groups, owner)
			continue
		}
		owner.members = append(owner.members, s)
	}

	// An open diagnosis owns its root and the alerts it listed: it stays
	// open while any of them fires (a backlog drains after the storm that
	// caused it), and they never open a diagnosis of their own meanwhile.
	owner := map[string]string{}
	for k, inc := range in.open {
		owner[inc.root] = k
		for _, m := range inc.members {
			owner[m] = k
		}
	}
	type update struct {
		inc     *incident
		members []*alertInfo
	}
	var order []string
	var opened []*incident
	updates := map[string]*update{}
	for _, g := range groups {
		key := g.root.key
		if g.root.typ == "symptom" {
			key = "unknown|" + g.root.ent.key()
		}
		if _, open := in.open[key]; !open {
			// A cause root follows its own owner; a cause-unknown group
			// follows the owner of any of its symptoms.
			cands := []*alertInfo{g.root}
			if g.root.typ == "symptom" {
				cands = append(cands, g.members...)
			}
			for _, a := range cands {
				if k, ok := owner[a.key]; ok {
					key = k
					break
				}
			}
		}
		u := updates[key]
		if u == nil {
			inc := in.open[key]
			if inc == nil {
				inc = in.openIncident(g.root)
				in.open[key] = inc
				opened = append(opened, inc)
			}
			u = &update{inc: inc}
			updates[key] = u
			order = append(order, key)
		}
		if g.root.key != u.inc.root {
			u.members = append(u.members, g.root)
		} else {
			u.inc.rootInfo = g.root
		}
		u.members = append(u.members, g.members...)
	}
	in.fingerprint(opened, t)
	var changed []Diagnosis
	seen := map[string]bool{}
	for _, key := range order {
		u := updates[key]
		seen[key] = true
		before := fingerprintOf(u.inc.d)
		in.update(ctx, u.inc, u.inc.rootInfo, u.members, all, t)
		if before != fingerprintOf(u.inc.d) || u.inc.d.Updated.IsZero() {
			u.inc.d.Updated = t
			in.e.o.Archive.Record(u.inc.d, u.inc.fp)
			changed = append(changed, u.inc.d)
		}
	}
	// Open diagnoses whose root is gone: resolved, or superseded when a cause
	// that began soon after now explains them.
	keys := make([]string, 0, len(in.open))
	for k := range in.open {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if seen[k] {
			continue
		}
		inc := in.open[k]
		delete(in.open, k)
		if in.superseded(inc, groups) {
			in.dropped = append(in.dropped, inc.d.ID)
			continue
		}
		end := t
		inc.d.State, inc.d.End, inc.d.Updated = StateResolved, &end, t
		in.e.o.Archive.Record(inc.d, inc.fp)
		changed = append(changed, inc.d)
	}
	return changed
}

// rootGroup is a root alert and the alerts it explains, at one minute.
type rootGroup struct {
	root    *alertInfo
	members []*alertInfo
}

// superseded: a diagnosis whose root (or, for cause unknown, one of whose
// symptoms) a cause that began at most supersedeWindow after it opened now
// explains.
func (in *incidents) superseded(inc *incident, groups []*rootGroup) bool {
	for _, g := range groups {
		if g.root.typ != "cause" || g.root.active.Sub(inc.d.Start) > supersedeWindow {
			continue
		}
		for _, m := range g.members {
			if m.key == inc.root || slices.Contains(inc.members, m.key) && inc.d.Cause == CauseUnknown {
				return true
			}
		}
	}
	return false
}

func (in *incidents) openIncident(root *alertInfo) *incident {
	inc := &incident{root: root.key, rootInfo: root}
	d := &inc.d
	d.State, d.Start, d.Entities = StateFiring, root.active, root.ent
	if root.typ == "cause" {
		d.Cause, d.Rule = root.cause, root.rule
		d.Summary, d.Description, d.RunbookURL = root.ann.Get("summary"), root.ann.Get("description"), root.ann.Get("runbook_url")
		d.Actions, _ = parseActions(root.ann.Get("actions"))
	} else {
		d.Cause = CauseUnknown
		d.Summary = "Cause unknown: " + root.ann.Get("summary")
	}
	d.ID = diagnosisID(d.Cause, d.Entities, d.Start)
	return inc
}

// fingerprint reads the fingerprints of the incidents opened at t (in one
// pass: Engine.fingerprints) and finds each one's similar cases, in the
// order they opened.
func (in *incidents) fingerprint(opened []*incident, t time.Time) {
	if len(opened) == 0 {
		return
	}
	ents := make([]Entities, len(opened))
	for i, inc := range opened {
		ents[i] = inc.rootInfo.ent
	}
	for i, fp := range in.e.fingerprints(ents, t) {
		opened[i].fp = fp
		opened[i].d.SimilarCases = in.e.o.Archive.Similar(fp, 3)
	}
}

// update refreshes an open diagnosis from its root and members at t.
func (in *incidents) update(ctx context.Context, inc *incident, root *alertInfo, members []*alertInfo, all []*alertInfo, t time.Time) {
	d := &inc.d
	// Evidence: the root's (and, for cause unknown, the symptoms')
	// evidence queries, each keeping its most extreme value so far.
	specs := parseEvidence(root.ann.Get("evidence"))
	if root.typ == "symptom" {
		for _, m := range members {
			specs = append(specs, parseEvidence(m.ann.Get("evidence"))...)
		}
	}
	if len(inc.evidence) != len(specs) {
		inc.evidence, inc.peaks, inc.bases = specs, make([]float64, len(specs)), make([]evidenceBase, len(specs))
		for i := range inc.peaks {
			inc.peaks[i] = math.NaN()
		}
	}
	tm := t.UnixMilli()
	for i, sp := range inc.evidence {
		v, ok := in.e.evalScalar(ctx, sp.Query, t)
		if !ok {
			continue
		}
		peak := math.IsNaN(inc.peaks[i]) || worse(sp.Op, v, inc.peaks[i])
		if peak {
			inc.peaks[i] = v
		}
		// The baseline at the peak (or the first one known).
		if peak || !inc.bases[i].ok {
			if b, ok := in.e.baselineOf(sp.Metric, d.Entities, sp.Op, inc.peaks[i], tm); ok {
				inc.bases[i] = b
			}
		}
	}
	d.Evidence = d.Evidence[:0]
	for i, sp := range inc.evidence {
		ev := Evidence{Metric: sp.Metric, Query: sp.Query, Threshold: sp.Threshold}
		if !math.IsNaN(inc.peaks[i]) {
			v := inc.peaks[i]
			ev.Value = &v
			if b := inc.bases[i]; b.ok {
				med, sig, dev := round3(b.med), round3(b.sig), math.Round(100*(v-b.med)/b.sig)/100
				ev.Baseline, ev.Sigma, ev.DeviationSigma, ev.BaselineSource = &med, &sig, &dev, b.src.String()
			}
		}
		d.Evidence = append(d.Evidence, ev)
	}
	// Entity labels the root lacks (a GPU alert has no model or instance)
	// come from the alerts it explains on the same entity.
	for _, m := range members {
		if sameEntity(root.ent, m.ent) {
			fill(&d.Entities, m.ent)
		}
	}
	// Symptoms: the members, in onset order; kept once seen.
	for _, m := range members {
		if !slices.Contains(inc.members, m.key) {
			inc.members = append(inc.members, m.key)
			d.Symptoms = append(d.Symptoms, Symptom{Alert: m.rule, Type: m.typ, Labels: m.lbls.Map(), Since: m.active})
		}
	}
	if root.typ == "symptom" {
		d.Severity = root.severity
		for _, m := range members {
			if severityRank(m.severity) > severityRank(d.Severity) {
				d.Severity = m.severity
			}
		}
		d.Dimension = root.dimension
	} else {
		d.Severity, d.Dimension = root.severity, root.dimension
	}
	d.Confidence, d.Candidates = in.score(inc, root, members, all)
}

// round3 keeps 3 significant digits (baselines are estimates).
func round3(x float64) float64 {
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	p := math.Pow(10, 2-math.Floor(math.Log10(math.Abs(x))))
	return math.Round(x*p) / p
}

func fill(dst *Entities, src Entities) {
	for _, f := range []struct {
		d *string
		s string
	}{
		{&dst.Model, src.Model}, {&dst.Namespace, src.Namespace}, {&dst.Pod, src.Pod}, {&dst.Instance, src.Instance},
		{&dst.Host, src.Host}, {&dst.GPU, src.GPU}, {&dst.UUID, src.UUID},
	} {
		if *f.d == "" {
			*f.d = f.s
		}
	}
}

func severityRank(s string) int {
	switch s {
	case "critical", "page":
		return 3
	case "warning":
		return 2
	case "info":
		return 1
	}
	return 0
}

// worse reports whether v is further from normal than w for a threshold op.
func worse(op string, v, w float64) bool {
	if strings.HasPrefix(op, "<") {
		return v < w
	}
	return v > w
}

func beyond(op string, v, th float64) bool {
	switch op {
	case "<":
		return v < th
	case "<=":
		return v <= th
	case ">=":
		return v >= th
	}
	return v > th
}

// score computes the confidence of the root and ranks the candidates
// (docs/diagnosis.md, "Confidence"). Over the root's evidence items that
// have a threshold or a baseline, each at its most extreme value so far:
//
//	beyond_i   = past its threshold, or at least k robust sigma from its
//	             baseline in the direction of its op
//	strength_i = the larger of the relative excess over the threshold
//	             (|v−t|/|t|, capped at 1; 1 past a zero threshold) and
//	             (dev−k)/(2k) capped at 1 for a deviation dev ≥ k sigma;
//	             0 when not beyond
//	raw        = 0.45 + 0.3·agree + 0.25·strength_primary
//	             (agree: share of items beyond; primary: the first item)
//	× quality  0.7 when the root's SM activity comes from GPU_UTIL
//	           (strata_source="gpu_util"); the primary item's baseline
//	           source: 1 hour of week, 0.95 same hour of recent days, 0.9
//	           last hours or replicas, 0.9 no baseline in seasonal mode
//	           unless the item is past its static threshold (1)
//	× margin   1 − 0.15 per other unexplained firing cause on the same
//	           entity (at least 0.4)
//
// then mapped through the calibration table (calibrate) fitted on the
// benchmark's tuning split. A cause-unknown diagnosis has confidence 0; its
// candidates are the causes the causal graph allows for its symptoms.
func (in *incidents) score(inc *incident, root *alertInfo, members, all []*alertInfo) (float64, []Candidate) {
	if root.typ == "symptom" {
		var cands []Candidate
		seen := map[string]bool{}
		for _, a := range all { // pending causes on the same entity first
			if a.typ == "cause" && sameEntity(a.ent, root.ent) && !seen[a.cause] {
				seen[a.cause] = true
				cands = append(cands, Candidate{Cause: a.cause, Score: 0.3, Rule: a.rule})
			}
		}
		for _, c := range Causes {
			for _, ed := range in.graph[c] {
				if ed.to == "symptom:"+root.symptom && !seen[c] {
					seen[c] = true
					cands = append(cands, Candidate{Cause: c, Score: 0.1})
				}
			}
		}
		return 0, cands
	}
	k := in.e.cfg.Baseline.K
	var n, agree, strength float64
	primary := true
	quality := 1.0
	for i, sp := range inc.evidence {
		peak, b := inc.peaks[i], inc.bases[i]
		if math.IsNaN(peak) || (sp.Threshold == nil && (!b.ok || sp.Op == "")) {
			continue
		}
		n++
		past, static, st := itemStrength(sp, peak, b, k)
		if past {
			agree++
		}
		if primary {
			primary = false
			strength = st
			// A young baseline weighs on evidence that rests on it, not
			// on a physical limit already passed.
			if in.e.base != nil && (b.ok || !static) {
				quality = sourceQuality(b)
			}
		}
	}
	if n > 0 {
		agree /= n
	} else {
		agree = 1
	}
	conf := 0.45 + 0.3*agree + 0.25*strength
	if root.lbls.Get("strata_source") == "gpu_util" {
		quality *= 0.7
	}
	conf *= quality
	rivals := 0
	cands := []Candidate{{Cause: root.cause, Rule: root.rule}}
	seen := map[string]bool{root.cause: true}
	for _, a := range all {
		if a.typ != "cause" || seen[a.cause] || !sameEntity(a.ent, root.ent) && !slices.Contains(members, a) {
			continue
		}
		seen[a.cause] = true
		s := 0.3
		switch {
		case slices.Contains(members, a):
			s = 0.4 // explained by the root: its signature, not its cause
		case a.state == rules.StateFiring:
			rivals++
			s = 0.6
		}
		cands = append(cands, Candidate{Cause: a.cause, Score: s, Rule: a.rule})
	}
	conf *= math.Max(0.4, 1-0.15*float64(rivals))
	// The candidates rank by raw score (the root's and its rivals' on one
	// scale, which the archive's rerank moves); the confidence is the root's
	// calibrated.
	cands[0].Score = math.Round(conf*1000) / 1000
	conf = Calibrate(cands[0].Score)
	slices.SortStableFunc(cands[1:], func(a, b Candidate) int {
		if a.Score != b.Score {
			if a.Score > b.Score {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Cause, b.Cause)
	})
	return conf, cands
}

// itemStrength says whether an evidence item's peak is past its static
// threshold (static) or at least k sigma from its baseline in the
// direction of its op (past: either), and how strongly (score).
func itemStrength(sp evidenceSpec, peak float64, b evidenceBase, k float64) (past, static bool, st float64) {
	if sp.Threshold != nil && beyond(sp.Op, peak, *sp.Threshold) {
		past, static = true, true
		st = 1 // past a zero threshold: an event (an XID), all or nothing
		if th := *sp.Threshold; th != 0 {
			st = math.Min(1, math.Abs(peak-th)/math.Abs(th))
		}
	}
	if b.ok && sp.Op != "" {
		if dev := b.deviation(sp.Op, peak); dev >= k {
			past = true
			st = math.Max(st, math.Min(1, (dev-k)/(2*k)))
		}
	}
	return past, static, st
}

// sourceQuality is how much a baseline of this source is trusted (score).
func sourceQuality(b evidenceBase) float64 {
	if !b.ok {
		return 0.9 // a static threshold: the series has no baseline yet
	}
	switch b.src {
	case sourceHourOfWeek:
		return 1
	case sourceSameHour:
		return 0.95
	}
	return 0.9
}

// calibration maps the raw score to the share of diagnoses that were right
// at that score on the benchmark's tuning split (docs/diagnosis.md,
// "Calibration"): piecewise linear between the knots, strictly increasing,
// so that it keeps the order of any two scores. Fitted by the benchmark
// (its report's table to ship for the tuning split: isotonic regression
// over the 67 diagnoses naming a cause of `strata diagnose bench
// --split=both --max-history=2d`, 2026-12-04, Laplace-smoothed): of the
// raw scores of 0.6-0.8, 1 in 10 was right; of 0.8 and above, 56 in 57.
var calibration = [][2]float64{{0, 0}, {0.725, 0.167}, {0.946, 0.966}, {1, 0.968}}

// CalibrationTable returns a copy of the calibration table's knots (raw
// score, confidence), for the benchmark, which fits the next one.
func CalibrationTable() [][2]float64 { return slices.Clone(calibration) }

// Calibrate is the confidence of a diagnosis whose first candidate has
// score raw: the calibration table's value, rounded to 3 decimals. The
// archive's rerank uses it when it changes the first candidate.
func Calibrate(raw float64) float64 { return math.Round(calibrate(raw)*1000) / 1000 }

func calibrate(raw float64) float64 {
	return PiecewiseLinear(calibration, math.Max(0, math.Min(1, raw)))
}

// PiecewiseLinear is the map through knots (x, y), in increasing x, at x:
// linear between two knots, flat beyond the first and the last.
func PiecewiseLinear(knots [][2]float64, x float64) float64 {
	if x <= knots[0][0] {
		return knots[0][1]
	}
	for i := 1; i < len(knots); i++ {
		a, b := knots[i-1], knots[i]
		if x <= b[0] {
			if b[0] == a[0] {
				return b[1]
			}
			return a[1] + (b[1]-a[1])*(x-a[0])/(b[0]-a[0])
		}
	}
	return knots[len(knots)-1][1]
}

// fingerprintOf summarises what a sink or the archive would see change.
func fingerprintOf(d Diagnosis) string {
	var b strings.Builder
	b.WriteString(string(d.State))
	b.WriteString(fmtFloat(d.Confidence))
	for _, s := range d.Symptoms {
		b.WriteString(s.Alert)
	}
	for _, c := range d.Candidates {
		b.WriteString(c.Cause + fmtFloat(c.Score))
	}
	return b.String()
}

func parseEvidence(s string) []evidenceSpec {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	var out []evidenceSpec
	if err := yaml.Unmarshal([]byte(s), &out); err != nil {
		return []evidenceSpec{{Metric: "evidence annotation is not a YAML list: " + err.Error()}}
	}
	return out
}

// parseActions reads the actions annotation: a YAML (or JSON) list of
// {action, effect, risk}.
func parseActions(s string) ([]Action, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []Action
	if err := yaml.Unmarshal([]byte(s), &out); err != nil {
		return nil, err
	}
	for _, a := range out {
		if a.Action == "" {
			return nil, errMissingAction
		}
	}
	return out, nil
}

var errMissingAction = errorString("every action needs an action field")

type errorString string

func (e errorString) Error() string { return string(e) }
