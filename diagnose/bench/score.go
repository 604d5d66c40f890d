package bench

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/strata-dev/strata/dcgmbridge/sim"
	"github.com/strata-dev/strata/diagnose"
)

// Matching windows (docs/diagnosis-bench.md, "Scores").
const (
	// Lead: a diagnosis that starts this long before a fault's onset can
	// still be the fault's (minute alignment).
	Lead = 2 * time.Minute
	// Tail: a diagnosis that starts up to this long after a fault ends is
	// still the fault's (late detection, recovery effects).
	Tail = 15 * time.Minute
	// DecoyTail: a diagnosis this long after a decoy ends, on its node, is
	// counted as caused by the decoy.
	DecoyTail = 30 * time.Minute
	// DetectionDeadline is the time to detect the issue asks for.
	DetectionDeadline = 3 * time.Minute
)

// FaultOutcome is how the diagnoses answered one fault.
type FaultOutcome struct {
	Scenario string    `json:"scenario"`
	Kind     string    `json:"kind"`
	Variant  string    `json:"variant,omitempty"`
	Target   string    `json:"target"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	// Concurrent is true when another fault overlapped this one.
	Concurrent bool `json:"concurrent,omitempty"`
	Detected   bool `json:"detected"`
	// Diagnosis is the primary answer: the earliest diagnosis on the fault's
	// node within its window.
	Diagnosis  string   `json:"diagnosis,omitempty"`
	Cause      string   `json:"cause,omitempty"`
	Candidates []string `json:"candidates,omitempty"`
	Confidence float64  `json:"confidence,omitempty"`
	Entity     string   `json:"entity,omitempty"`
	CauseTop1  bool     `json:"cause_top1"`
	CauseTop3  bool     `json:"cause_top3"`
	EntityTop1 bool     `json:"entity_top1"`
	EntityTop3 bool     `json:"entity_top3"`
	// TTDSeconds is the first firing minute of the fault's diagnoses minus
	// the onset (negative when it fired in the onset's minute).
	TTDSeconds float64 `json:"ttd_seconds,omitempty"`
	// Reranked is the cause after the archive's rerank (the feedback
	// experiment), when it ran.
	Reranked string `json:"reranked,omitempty"`
	// Nearest is the cause of the nearest other archived case
	// (leave-one-out), as the operator's verdict made it.
	Nearest string `json:"nearest,omitempty"`
}

// FalseDiagnosis is a diagnosis that matches no fault.
type FalseDiagnosis struct {
	Scenario   string    `json:"scenario"`
	ID         string    `json:"id"`
	Cause      string    `json:"cause"`
	Entity     string    `json:"entity"`
	Start      time.Time `json:"start"`
	Confidence float64   `json:"confidence"`
	// Where: "history" (the fault-free days), "decoy" (near a decoy: Decoy
	// names it) or "incident_period" (elsewhere among the incidents).
	Where string `json:"where"`
	Decoy string `json:"decoy,omitempty"`
}

// judged is one diagnosis with what the scoring decided about it.
type judged struct {
	d       diagnose.Diagnosis
	fired   time.Time // first minute it was reported
	correct bool      // attributed to a fault of its cause
	matched bool      // attributed to some fault
}

// scenarioInput is what scoring one scenario needs.
type scenarioInput struct {
	sc        Scenario
	truth     []sim.Fault
	diagnoses []diagnose.Diagnosis
	fired     map[string]time.Time
	variants  []string // per truth record (decoys: "")
}

// scoreScenario attributes the diagnoses of one scenario to its faults and
// decoys.
func scoreScenario(in scenarioInput) ([]FaultOutcome, []FalseDiagnosis, []judged) {
	js := make([]judged, len(in.diagnoses))
	for i, d := range in.diagnoses {
		js[i] = judged{d: d, fired: d.Start}
		if t, ok := in.fired[d.ID]; ok {
			js[i].fired = t
		}
	}
	var outs []FaultOutcome
	for fi, f := range in.truth {
		if f.Decoy {
			continue
		}
		o := FaultOutcome{Scenario: in.sc.Name, Kind: string(f.Kind), Variant: in.variants[fi], Target: targetString(f), Start: f.Start, End: f.End}
		for fj, g := range in.truth {
			if fj != fi && !g.Decoy && g.Start.Before(f.End) && f.Start.Before(g.End) {
				o.Concurrent = true
			}
		}
		// The fault's answers: diagnoses on its node that start in its
		// window, earliest first (what an operator sees first).
		var ans []int
		for i, j := range js {
			if related(j.d.Entities, f) && !j.d.Start.Before(f.Start.Add(-Lead)) && !j.d.Start.After(f.End.Add(Tail)) {
				ans = append(ans, i)
			}
		}
		slices.SortStableFunc(ans, func(a, b int) int {
			if c := js[a].d.Start.Compare(js[b].d.Start); c != 0 {
				return c
			}
			return -cmpFloat(js[a].d.Confidence, js[b].d.Confidence)
		})
		for k, i := range ans {
			j := &js[i]
			j.matched = true
			if j.d.Cause == string(f.Kind) {
				j.correct = true
			}
			if k < 3 && exact(j.d.Entities, f) {
				o.EntityTop3 = true
			}
			ttd := j.fired.Sub(f.Start).Seconds()
			if !o.Detected || ttd < o.TTDSeconds {
				o.TTDSeconds = ttd
			}
			o.Detected = true
		}
		if len(ans) > 0 {
			p := js[ans[0]].d
			o.Diagnosis, o.Cause, o.Confidence, o.Entity = p.ID, p.Cause, p.Confidence, entityString(p.Entities)
			for _, c := range p.Candidates {
				o.Candidates = append(o.Candidates, c.Cause)
			}
			o.CauseTop1 = p.Cause == string(f.Kind)
			o.CauseTop3 = o.CauseTop1 || slices.Contains(firstN(o.Candidates, 3), string(f.Kind))
			o.EntityTop1 = exact(p.Entities, f)
		}
		outs = append(outs, o)
	}
	var falses []FalseDiagnosis
	for _, j := range js {
		if j.matched {
			continue
		}
		fd := FalseDiagnosis{Scenario: in.sc.Name, ID: j.d.ID, Cause: j.d.Cause, Entity: entityString(j.d.Entities), Start: j.d.Start, Confidence: j.d.Confidence, Where: "incident_period"}
		if j.d.Start.Before(in.sc.Start()) {
			fd.Where = "history"
		}
		for _, f := range in.truth {
			if f.Decoy && related(j.d.Entities, f) && !j.d.Start.Before(f.Start.Add(-Lead)) && !j.d.Start.After(f.End.Add(DecoyTail)) {
				fd.Where, fd.Decoy = "decoy", string(f.Kind)+" "+targetString(f)
				break
			}
		}
		falses = append(falses, fd)
	}
	return outs, falses, js
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func firstN(s []string, n int) []string { return s[:min(n, len(s))] }

// host of an entity: its host label, or the host part of its instance.
func host(e diagnose.Entities) string {
	if e.Host != "" {
		return e.Host
	}
	if i := strings.LastIndexByte(e.Instance, ':'); i > 0 {
		return e.Instance[:i]
	}
	return ""
}

// related reports whether a diagnosis' entity is on the fault's node or is
// the fault's pod (the entities a fault can show on: its GPU, the instance
// serving it, its node).
func related(e diagnose.Entities, f sim.Fault) bool {
	if f.Target.Pod != "" && e.Pod == f.Target.Pod {
		return true
	}
	return host(e) == f.Target.Node
}

// exact reports whether a diagnosis names the fault's own entity:
// namespace/pod or instance for instance-scoped faults, host and GPU (or
// UUID) for GPU-scoped ones, the host alone for node-scoped ones.
func exact(e diagnose.Entities, f sim.Fault) bool {
	t := f.Target
	switch {
	case t.Instance != "":
		return (e.Pod == t.Pod && e.Namespace == t.Namespace) || e.Instance == t.Instance
	case t.GPU != nil:
		return (t.UUID != "" && e.UUID == t.UUID) || (host(e) == t.Node && e.GPU == strconv.Itoa(*t.GPU))
	default:
		return host(e) == t.Node && e.Pod == "" && e.GPU == "" && e.UUID == ""
	}
}

func targetString(f sim.Fault) string {
	t := f.Target
	switch {
	case t.Instance != "":
		return t.Instance + " (" + t.Pod + ")"
	case t.GPU != nil:
		return t.Node + " gpu " + strconv.Itoa(*t.GPU)
	}
	return t.Node
}

func entityString(e diagnose.Entities) string {
	var parts []string
	for _, kv := range [][2]string{{"pod", e.Pod}, {"instance", e.Instance}, {"host", e.Host}, {"gpu", e.GPU}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+kv[1])
		}
	}
	return strings.Join(parts, " ")
}

// Scores are the figures of a set of faults and diagnoses.
type Scores struct {
	Faults     int `json:"faults"`
	Detected   int `json:"detected"`
	CauseTop1  int `json:"cause_top1"`
	CauseTop3  int `json:"cause_top3"`
	EntityTop1 int `json:"entity_top1"`
	EntityTop3 int `json:"entity_top3"`
	// Unknown counts faults whose primary answer is cause unknown.
	Unknown int `json:"unknown"`
	// DetectionRate and the accuracies are shares of all faults (a missed
	// fault counts as wrong).
	DetectionRate float64 `json:"detection_rate"`
	CauseAcc1     float64 `json:"cause_acc_top1"`
	CauseAcc3     float64 `json:"cause_acc_top3"`
	EntityAcc1    float64 `json:"entity_acc_top1"`
	EntityAcc3    float64 `json:"entity_acc_top3"`
	UnknownRate   float64 `json:"unknown_rate"`
	// TTD over the detected faults, seconds.
	TTDMean      float64 `json:"ttd_mean_seconds"`
	TTDP95       float64 `json:"ttd_p95_seconds"`
	TTDWithin3m  float64 `json:"ttd_within_3m"`
	Diagnoses    int     `json:"diagnoses"`
	UnknownDiags int     `json:"unknown_diagnoses"`
	// False diagnoses: on the fault-free history days (per day), around
	// decoys, and elsewhere in the incident periods.
	HistoryDays      float64 `json:"history_days"`
	FalseHistory     int     `json:"false_history"`
	FalsePerDay      float64 `json:"false_per_fault_free_day"`
	Decoys           int     `json:"decoys"`
	FalseDecoy       int     `json:"false_decoy"`
	FalseIncident    int     `json:"false_incident_period"`
	ECE              float64 `json:"expected_calibration_error"`
	NearestRight     int     `json:"nearest_case_right"`
	NearestCases     int     `json:"nearest_cases"`
	NearestAcc       float64 `json:"nearest_case_acc"`
	RerankedTop1     int     `json:"reranked_top1,omitempty"`
	RerankedAcc1     float64 `json:"reranked_acc_top1,omitempty"`
	RerankedFaults   int     `json:"reranked_faults,omitempty"`
	UnknownDiagsRate float64 `json:"unknown_diagnoses_rate"`
}

func summarize(outs []FaultOutcome) Scores {
	var s Scores
	var ttds []float64
	for _, o := range outs {
		s.Faults++
		if o.Detected {
			s.Detected++
			ttds = append(ttds, o.TTDSeconds)
		}
		s.CauseTop1 += b2i(o.CauseTop1)
		s.CauseTop3 += b2i(o.CauseTop3)
		s.EntityTop1 += b2i(o.EntityTop1)
		s.EntityTop3 += b2i(o.EntityTop3)
		s.Unknown += b2i(o.Cause == diagnose.CauseUnknown)
		if o.Nearest != "" {
			s.NearestCases++
			s.NearestRight += b2i(o.Nearest == o.Kind)
		}
		if o.Reranked != "" {
			s.RerankedFaults++
			s.RerankedTop1 += b2i(o.Reranked == o.Kind)
		}
	}
	s.DetectionRate = ratio(s.Detected, s.Faults)
	s.CauseAcc1, s.CauseAcc3 = ratio(s.CauseTop1, s.Faults), ratio(s.CauseTop3, s.Faults)
	s.EntityAcc1, s.EntityAcc3 = ratio(s.EntityTop1, s.Faults), ratio(s.EntityTop3, s.Faults)
	s.UnknownRate = ratio(s.Unknown, s.Faults)
	s.NearestAcc = ratio(s.NearestRight, s.NearestCases)
	s.RerankedAcc1 = ratio(s.RerankedTop1, s.RerankedFaults)
	if len(ttds) > 0 {
		for _, x := range ttds {
			s.TTDMean += x / float64(len(ttds))
			s.TTDWithin3m += float64(b2i(x <= DetectionDeadline.Seconds())) / float64(len(ttds))
		}
		s.TTDP95 = quantile(ttds, 0.95)
	}
	return s
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func ratio(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// quantile is the q-quantile of xs (linear interpolation).
func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return math.NaN()
	}
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

// Bucket is one row of the reliability table.
type Bucket struct {
	Lo, Hi   float64 `json:"-"`
	Range    string  `json:"range"`
	N        int     `json:"n"`
	Stated   float64 `json:"stated"`   // mean confidence
	Observed float64 `json:"observed"` // share correct
}

// reliability buckets the diagnoses by stated confidence (tenths) and
// returns the table and the expected calibration error
// Σ n_b/N · |observed_b − stated_b|.
func reliability(js []judged) ([]Bucket, float64) {
	bs := make([]Bucket, 10)
	for i := range bs {
		bs[i].Lo, bs[i].Hi = float64(i)/10, float64(i+1)/10
		bs[i].Range = strconv.FormatFloat(bs[i].Lo, 'f', 1, 64) + "–" + strconv.FormatFloat(bs[i].Hi, 'f', 1, 64)
	}
	n := 0
	for _, j := range js {
		k := min(9, max(0, int(j.d.Confidence*10)))
		bs[k].N++
		bs[k].Stated += j.d.Confidence
		bs[k].Observed += float64(b2i(j.correct))
		n++
	}
	ece := 0.0
	var out []Bucket
	for _, b := range bs {
		if b.N == 0 {
			continue
		}
		b.Stated /= float64(b.N)
		b.Observed /= float64(b.N)
		ece += float64(b.N) / float64(n) * math.Abs(b.Observed-b.Stated)
		out = append(out, b)
	}
	return out, ece
}

// Confusion counts primary answers by true kind (rows) and diagnosed cause
// (columns, plus "unknown" and "missed").
type Confusion struct {
	Kinds  []string `json:"kinds"`
	Causes []string `json:"causes"`
	Counts [][]int  `json:"counts"`
}

func confusion(outs []FaultOutcome) Confusion {
	c := Confusion{Kinds: slices.Clone(diagnose.Causes), Causes: append(slices.Clone(diagnose.Causes), diagnose.CauseUnknown, "missed")}
	c.Counts = make([][]int, len(c.Kinds))
	for i := range c.Counts {
		c.Counts[i] = make([]int, len(c.Causes))
	}
	for _, o := range outs {
		r := slices.Index(c.Kinds, o.Kind)
		col := slices.Index(c.Causes, o.Cause)
		if !o.Detected {
			col = len(c.Causes) - 1
		}
		if r >= 0 && col >= 0 {
			c.Counts[r][col]++
		}
	}
	return c
}
