package diagnose

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
)

// State is a diagnosis' state.
type State string

// Diagnosis states.
const (
	StateFiring   State = "firing"
	StateResolved State = "resolved"
)

// CauseUnknown is the cause of a diagnosis made of symptom alerts that no
// cause alert explains.
const CauseUnknown = "unknown"

// Diagnosis is one incident: its root cause, what it explains, the evidence
// and what to do. It is the JSON of GET /api/v1/diagnoses and of
// `strata diagnose --format=json` (docs/diagnosis.md documents each field).
type Diagnosis struct {
	// ID is stable: a hash of the cause, the root entity and the start.
	ID         string  `json:"id"`
	Cause      string  `json:"cause"`
	State      State   `json:"state"`
	Severity   string  `json:"severity"`
	Dimension  string  `json:"dimension"`
	Confidence float64 `json:"confidence"`
	// Start is when the root cause's condition first held (its alert's
	// active time); End is when the diagnosis resolved (nil while firing).
	Start    time.Time  `json:"start"`
	End      *time.Time `json:"end"`
	Entities Entities   `json:"entities"`
	// Candidates ranks the causes that could explain the incident, best
	// first; the first one is Cause (unless Cause is unknown).
	Candidates []Candidate `json:"candidates"`
	// Symptoms are the alerts the root cause explains: symptom alerts and
	// other cause rules whose signature the root produces.
	Symptoms []Symptom  `json:"symptoms"`
	Evidence []Evidence `json:"evidence"`
	Actions  []Action   `json:"actions"`
	// Rule is the alerting rule of the root cause (empty for unknown).
	Rule        string `json:"rule"`
	Summary     string `json:"summary,omitempty"`
	Description string `json:"description,omitempty"`
	RunbookURL  string `json:"runbook_url,omitempty"`
	// SimilarCases come from the case archive (empty without one).
	SimilarCases []SimilarCase `json:"similar_cases"`
	// Updated is the last minute evaluated while the diagnosis was open.
	Updated time.Time `json:"updated"`
}

// Entities are the labels that locate a diagnosis; empty ones are left out.
type Entities struct {
	Model     string `json:"model,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Instance  string `json:"instance,omitempty"`
	Host      string `json:"host,omitempty"`
	GPU       string `json:"gpu,omitempty"`
	UUID      string `json:"uuid,omitempty"`
}

// Map returns the non-empty entity labels by JSON name.
func (e Entities) Map() map[string]string {
	m := map[string]string{}
	for k, v := range map[string]string{"model": e.Model, "namespace": e.Namespace, "pod": e.Pod, "instance": e.Instance, "host": e.Host, "gpu": e.GPU, "uuid": e.UUID} {
		if v != "" {
			m[k] = v
		}
	}
	return m
}

// ReplicaKey names the replica (the serving process) an entity is: its
// pod, or outside Kubernetes, where there is no pod label, a model's
// serving instance (vLLM scraped by static_configs); "" for a GPU or a
// host. Two entities with the same non-empty key are the same replica.
func (e Entities) ReplicaKey() string {
	switch {
	case e.Pod != "":
		return "pod " + e.Namespace + "/" + e.Pod
	case e.servingInstance():
		return "instance " + e.Instance
	}
	return ""
}

// servingInstance reports whether e is a replica without a pod: a model's
// serving instance.
func (e Entities) servingInstance() bool {
	return e.Pod == "" && e.Model != "" && e.Instance != "" && e.UUID == "" && e.GPU == ""
}

// SameReplica reports whether e and o are the same replica, as equal
// non-empty ReplicaKeys say, without making the keys: the evidence asks it
// of every tracked series of a metric for each diagnosis, and the two keys
// made for each were 41 MB in use at the minute's collection at 500,000
// active series.
func (e Entities) SameReplica(o Entities) bool {
	switch {
	case e.Pod != "":
		return e.Pod == o.Pod && e.Namespace == o.Namespace
	case e.servingInstance():
		return o.servingInstance() && e.Instance == o.Instance
	}
	return false
}

// key identifies the root entity for the ID: the most specific labels.
func (e Entities) key() string {
	return e.Namespace + "/" + e.Pod + "|" + e.Host + "/" + e.GPU + "|" + e.UUID + "|" + e.Instance
}

// Candidate is one possible cause and its score in [0,1].
type Candidate struct {
	Cause string  `json:"cause"`
	Score float64 `json:"score"`
	// Rule is the alerting rule that gave the candidate (empty when the
	// candidate only comes from the causal graph).
	Rule string `json:"rule,omitempty"`
}

// Symptom is an alert a diagnosis explains.
type Symptom struct {
	Alert  string            `json:"alert"`
	Type   string            `json:"type"` // "symptom" or "cause" (a cause rule explained by the root)
	Labels map[string]string `json:"labels"`
	Since  time.Time         `json:"since"`
}

// Evidence is one metric that shows the cause.
type Evidence struct {
	Metric string   `json:"metric"`
	Value  *float64 `json:"value"`
	// Threshold is the static threshold of the rule, when it has one.
	Threshold *float64 `json:"threshold,omitempty"`
	// Baseline, Sigma and DeviationSigma come from the baselines
	// (docs/diagnosis.md, "Baselines"); nil while a rule uses a static
	// threshold only.
	Baseline       *float64 `json:"baseline"`
	Sigma          *float64 `json:"sigma"`
	DeviationSigma *float64 `json:"deviation_sigma"`
	// BaselineSource says what the baseline rests on: hour_of_week (weeks
	// of history), same_hour_recent_days, last_hours or replicas (a young
	// series); empty without a baseline.
	BaselineSource string `json:"baseline_source,omitempty"`
	// Query is the PromQL that shows the metric over the incident.
	Query string `json:"query"`
}

// Action is a suggested remedy.
type Action struct {
	Action string `json:"action"`
	Effect string `json:"effect"`
	Risk   string `json:"risk"`
}

// SimilarCase is a past case the archive found similar.
type SimilarCase struct {
	ID         string  `json:"id"`
	Cause      string  `json:"cause"`
	Similarity float64 `json:"similarity"`
	// Verdict is the operator's feedback on the past case, when given
	// ("confirmed", "rejected").
	Verdict string `json:"verdict,omitempty"`
}

// diagnosisID is "d-" and 16 hex digits of a hash of cause, root entity and start.
func diagnosisID(cause string, e Entities, start time.Time) string {
	h := sha256.Sum256([]byte(cause + "\x00" + e.key() + "\x00" + strconv.FormatInt(start.UnixMilli(), 10)))
	return "d-" + hex.EncodeToString(h[:8])
}

// MarshalJSON writes empty lists as [] (never null) and times in UTC.
func (d Diagnosis) MarshalJSON() ([]byte, error) {
	type plain Diagnosis
	p := plain(d)
	p.Start = p.Start.UTC()
	p.Updated = p.Updated.UTC()
	if p.End != nil {
		e := p.End.UTC()
		p.End = &e
	}
	if p.Candidates == nil {
		p.Candidates = []Candidate{}
	}
	if p.Symptoms == nil {
		p.Symptoms = []Symptom{}
	}
	if p.Evidence == nil {
		p.Evidence = []Evidence{}
	}
	if p.Actions == nil {
		p.Actions = []Action{}
	}
	if p.SimilarCases == nil {
		p.SimilarCases = []SimilarCase{}
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("marshal diagnosis %s: %w", d.ID, err)
	}
	return b, nil
}

// Overlaps reports whether the diagnosis was open at some time in [from, to].
func (d Diagnosis) Overlaps(from, to time.Time) bool {
	if d.Start.After(to) {
		return false
	}
	return d.End == nil || !d.End.Before(from)
}
