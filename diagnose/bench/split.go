package bench

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"slices"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/strata-dev/strata/dcgmbridge/sim"
	"github.com/strata-dev/strata/diagnose"
)

//go:embed splits/*.yaml
var splitFiles embed.FS

// Split names.
const (
	SplitTuning  = "tuning"
	SplitHeldout = "heldout"
)

// Split is one split file (diagnose/bench/splits/*.yaml): the scenarios of
// the full benchmark and those of its short (CI) form.
type Split struct {
	Name string `yaml:"name"`
	// Purpose says what the split may be used for; the held-out split is
	// never used to tune rules or thresholds.
	Purpose   string     `yaml:"purpose"`
	Scenarios []Scenario `yaml:"scenarios"`
	Short     []Scenario `yaml:"short"`
}

// Scenario is one simulated cluster: fault-free history, then an incident
// period holding the incidents and decoys.
type Scenario struct {
	Name string `yaml:"name"`
	// Cluster is the simulator's configuration (docs/simulator.md); its
	// start is the start of the history, and its faults come from Incidents.
	Cluster sim.Config `yaml:"cluster"`
	// History is the fault-free time before the incident period, sampled
	// every HistoryStep.
	History     Duration `yaml:"history"`
	HistoryStep Duration `yaml:"history_step"`
	// Period is the length of the incident period, sampled every Step
	// except inside Segments.
	Period   Duration  `yaml:"period"`
	Step     Duration  `yaml:"step"`
	Segments []Segment `yaml:"segments"`
	// Incidents are the faults and decoys, timed from the start of the
	// incident period.
	Incidents []Incident `yaml:"incidents"`
}

// Segment samples part of the incident period at another step (for
// example a 15 s scrape interval instead of 1 s).
type Segment struct {
	From Duration `yaml:"from"`
	To   Duration `yaml:"to"`
	Step Duration `yaml:"step"`
}

// Incident is one fault or decoy.
type Incident struct {
	Kind     sim.Kind           `yaml:"kind"`
	Node     int                `yaml:"node"`
	GPU      *int               `yaml:"gpu"`
	At       Duration           `yaml:"at"`
	Duration Duration           `yaml:"duration"`
	Params   map[string]float64 `yaml:"params"`
	// Variant names how a held-out incident differs from the tuning split
	// (weaker, shorter, model, vllm_v0, scrape_15s, young_install,
	// bare_metal).
	Variant string `yaml:"variant"`
	// WithPrevious marks a deliberate related pair: this incident starts
	// while the previous one, on the same node, is still on (a throttled
	// GPU whose instance then backs up), so the recovery rule does not
	// apply between the two.
	WithPrevious bool `yaml:"with_previous"`
}

// Duration is a time.Duration written as "90m", "14d" or "1h30m".
type Duration time.Duration

// UnmarshalYAML reads Go durations plus a whole number of days ("14d").
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	var s string
	if err := n.Decode(&s); err != nil {
		return err
	}
	var days int
	if _, err := fmt.Sscanf(s, "%dd", &days); err == nil && fmt.Sprintf("%dd", days) == s {
		*d = Duration(time.Duration(days) * 24 * time.Hour)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("line %d: duration %q: %w", n.Line, s, err)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration as Go does.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// D is d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// LoadSplit reads an embedded split by name.
func LoadSplit(name string) (Split, error) {
	b, err := splitFiles.ReadFile("splits/" + name + ".yaml")
	if err != nil {
		return Split{}, fmt.Errorf("unknown split %q (known: %s, %s)", name, SplitTuning, SplitHeldout)
	}
	return ParseSplit(b)
}

// ParseSplit parses and validates a split file; unknown keys are errors.
func ParseSplit(b []byte) (Split, error) {
	var s Split
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&s); err != nil {
		return Split{}, fmt.Errorf("parse split: %w", err)
	}
	for i := range s.Scenarios {
		s.Scenarios[i].Cluster = s.Scenarios[i].Cluster.Defaults()
	}
	for i := range s.Short {
		s.Short[i].Cluster = s.Short[i].Cluster.Defaults()
	}
	if err := s.Validate(); err != nil {
		return Split{}, fmt.Errorf("split %s: %w", s.Name, err)
	}
	return s, nil
}

// Variants a held-out incident may carry.
var Variants = []string{"weaker", "shorter", "model", "vllm_v0", "scrape_15s", "young_install", "bare_metal"}

// Recovery is the least time between the end of one incident and the start
// of the next on a related entity (the same node), so that each diagnosis
// belongs to one incident; incidents on different nodes may overlap (the
// two-faults-at-once cases).
const Recovery = 20 * time.Minute

// Validate checks what the scoring relies on: known kinds and targets,
// incidents inside the period, steps that divide a minute's multiples, and
// no two incidents on one node closer than Recovery.
func (s Split) Validate() error {
	if s.Name == "" {
		return errors.New("no name")
	}
	for _, list := range [][]Scenario{s.Scenarios, s.Short} {
		for _, sc := range list {
			if err := sc.validate(); err != nil {
				return fmt.Errorf("scenario %s: %w", sc.Name, err)
			}
		}
	}
	return nil
}

func (sc Scenario) validate() error {
	if sc.Name == "" {
		return errors.New("no name")
	}
	if sc.History <= 0 || sc.Period <= 0 || sc.HistoryStep <= 0 || sc.Step <= 0 {
		return errors.New("history, history_step, period and step must be positive")
	}
	for _, st := range append([]Duration{sc.HistoryStep, sc.Step}, segSteps(sc.Segments)...) {
		if time.Minute%st.D() != 0 {
			return fmt.Errorf("step %s must divide a minute", st.D())
		}
	}
	for i, g := range sc.Segments {
		if g.From < 0 || g.To <= g.From || g.To > sc.Period || (i > 0 && g.From < sc.Segments[i-1].To) {
			return fmt.Errorf("segment %d [%s, %s) is outside the period or overlaps the previous one", i, g.From.D(), g.To.D())
		}
	}
	if len(sc.Cluster.Faults) > 0 {
		return errors.New("cluster.faults must be empty: list the faults under incidents")
	}
	cfg := sc.Cluster
	cfg.Faults = sc.Faults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	for i, in := range sc.Incidents {
		if in.At < 0 || in.At.D()+max(in.Duration.D(), time.Minute) > sc.Period.D() {
			return fmt.Errorf("incident %d (%s) ends after the period", i, in.Kind)
		}
		if in.Variant != "" && !slices.Contains(Variants, in.Variant) {
			return fmt.Errorf("incident %d: unknown variant %q (known: %v)", i, in.Variant, Variants)
		}
		if !slices.Contains(diagnose.Causes, string(in.Kind)) && !isDecoy(in.Kind) {
			return fmt.Errorf("incident %d: kind %s is neither a diagnosis cause nor a decoy", i, in.Kind)
		}
		for j := range i {
			o := sc.Incidents[j]
			if o.Node != in.Node || (in.WithPrevious && j == i-1) {
				continue
			}
			a0, a1 := o.At.D(), o.At.D()+o.Duration.D()
			b0, b1 := in.At.D(), in.At.D()+in.Duration.D()
			if b0 < a1+Recovery && a0 < b1+Recovery {
				return fmt.Errorf("incidents %d (%s at %s) and %d (%s at %s) on node %d are less than %s apart", j, o.Kind, a0, i, in.Kind, b0, in.Node, Recovery)
			}
		}
	}
	return nil
}

func segSteps(gs []Segment) []Duration {
	var out []Duration
	for _, g := range gs {
		out = append(out, g.Step)
	}
	return out
}

func isDecoy(k sim.Kind) bool {
	switch k {
	case sim.KindBenignSpike, sim.KindDeploy, sim.KindScrapeGap, sim.KindIdleReplica:
		return true
	}
	return false
}

// Start is when the incident period starts.
func (sc Scenario) Start() time.Time { return sc.Cluster.Start.Add(sc.History.D()) }

// End is when the incident period ends.
func (sc Scenario) End() time.Time { return sc.Start().Add(sc.Period.D()) }

// Faults are the incidents as the simulator's fault specs.
func (sc Scenario) Faults() []sim.FaultSpec {
	out := make([]sim.FaultSpec, 0, len(sc.Incidents))
	for _, in := range sc.Incidents {
		out = append(out, sim.FaultSpec{
			Kind: in.Kind, Node: in.Node, GPU: in.GPU, Start: sc.Start().Add(in.At.D()),
			Duration: in.Duration.D(), Params: in.Params,
		})
	}
	return out
}

// plan is the sampling of a scenario: consecutive ranges [from, to) with
// their step.
type span struct {
	from, to time.Time
	step     time.Duration
}

func (sc Scenario) plan() []span {
	out := []span{{sc.Cluster.Start, sc.Start(), sc.HistoryStep.D()}}
	at := sc.Start()
	for _, g := range sc.Segments {
		if f := sc.Start().Add(g.From.D()); f.After(at) {
			out = append(out, span{at, f, sc.Step.D()})
		}
		at = sc.Start().Add(g.To.D())
		out = append(out, span{sc.Start().Add(g.From.D()), at, g.Step.D()})
	}
	if at.Before(sc.End()) {
		out = append(out, span{at, sc.End(), sc.Step.D()})
	}
	return out
}

// withHistory returns the scenario with a history of h, ending where the
// original ends: the incident period keeps its dates (and so its weekdays
// and times of day), and the cluster starts later.
func (sc Scenario) withHistory(h time.Duration) Scenario {
	start := sc.Start()
	sc.History = Duration(h)
	sc.Cluster.Start = start.Add(-h)
	return sc
}
