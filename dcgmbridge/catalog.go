package dcgmbridge

import (
	"bytes"
	_ "embed"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// dcgmFieldsCSV is derived from DCGM 4.6.1's field list (go-dcgm
// pkg/dcgm/dcgm_fields.h, copied as testdata/dcgm_field_ids.csv), with the
// Prometheus type, unit and dcgm-exporter 1.x name added by hand from
// dcgm-exporter's etc/*.csv (testdata/README.md gives the sources). It is a list of public field
// IDs, kept as CSV so that a review sees one line per field; TestFieldCatalogueMatchesFixture
// checks it against the fixture.
//
//go:embed dcgm_fields.csv
var dcgmFieldsCSV []byte

// Field is one DCGM field. DCGM 4.6 renamed many fields but kept their numeric
// IDs, so the ID is the key; every spelling an exporter may emit is an alias.
type Field struct {
	ID int
	// Legacy is the pre-4.6 name, the one dcgm-exporter's default CSVs use.
	Legacy string
	// DCGM46 is the DCGM 4.6 "Field Naming Standard" name, empty when unchanged.
	DCGM46 string
	// Exporter1x is the lowercase name dcgm-exporter 1.x (--use-old-namespace with
	// 1.x-compatibility-metrics.csv) emits, empty when it has none.
	Exporter1x string
	// Type is the Prometheus type dcgm-exporter gives it: gauge, counter or label.
	Type string
	// Unit of the exposed value (percent, ratio, MHz, ...).
	Unit string
	Help string
}

// Names returns every metric name under which the field may be exposed,
// the legacy name first.
func (f Field) Names() []string {
	names := []string{f.Legacy}
	if f.DCGM46 != "" {
		names = append(names, f.DCGM46)
	}
	if f.Exporter1x != "" {
		names = append(names, f.Exporter1x)
	}
	return names
}

// Source names a family of exporters whose metric names Strata understands.
type Source string

// The sources of the catalogue.
const (
	SourceDCGM     Source = "dcgm-exporter"
	SourceVLLMV0   Source = "vllm-v0"
	SourceVLLMV1   Source = "vllm-v1"
	SourceSGLang   Source = "sglang"
	SourceTGI      Source = "tgi"
	SourceTriton   Source = "triton"
	SourceTRTLLM   Source = "trtllm-serve"
	SourceEBPF     Source = "ebpf_exporter"
	SourceBPFTrace Source = "bpftrace_exporter"
)

// Cause is the axis of the four-dimension model that says where a cause lives.
type Cause string

// The four causes.
const (
	CauseCompute    Cause = "compute"
	CauseMemory     Cause = "memory"
	CauseNetwork    Cause = "network"
	CauseScheduling Cause = "scheduling"
)

// Felt is the axis of the four-dimension model that says what a user notices.
type Felt string

// The four effects.
const (
	FeltLatency     Felt = "latency"
	FeltThroughput  Felt = "throughput"
	FeltUtilisation Felt = "utilisation"
	FeltQuality     Felt = "quality"
)

// SourceMetric is one metric name an upstream exporter exposes, with what Strata
// makes of it. Names are the full exposed family names (counters with their
// _total, histograms without _bucket): vLLM's code and exposition differ there.
type SourceMetric struct {
	Name   string
	Source Source
	// Versions says which releases expose the name ("all" when it never changed).
	Versions string
	Type     string // counter, gauge, histogram
	Unit     string
	// Canonical are the canonical series the metric feeds, none for a metric
	// Strata stores but does not map.
	Canonical []string
	Note      string
}

// LabelAlias is a label an exporter spells differently across versions. Rules
// copy From into To where To is missing, so both spellings join.
type LabelAlias struct {
	Source Source
	From   string
	To     string
	Note   string
}

// Catalogue is everything Strata knows about its sources: DCGM fields by ID, the
// upstream metric names, the canonical series built from them and the shape
// of each exporter's exposition (Exposition). It is immutable after
// NewCatalogue and safe for concurrent use.
type Catalogue struct {
	Fields       []Field
	byID         map[int]int
	byName       map[string]int
	gauges       map[string]struct{}
	expositions  []Exposition
	Metrics      []SourceMetric
	LabelAliases []LabelAlias
	Canonical    []CanonicalMetric
}

// NewCatalogue builds the catalogue from the embedded DCGM field list and the
// tables in this package.
func NewCatalogue() (*Catalogue, error) {
	fields, err := parseFieldsCSV(dcgmFieldsCSV)
	if err != nil {
		return nil, fmt.Errorf("dcgm field catalogue: %w", err)
	}
	c := &Catalogue{
		Fields:       fields,
		byID:         make(map[int]int, len(fields)),
		byName:       make(map[string]int, 3*len(fields)),
		Metrics:      sourceMetrics(),
		LabelAliases: labelAliases(),
		Canonical:    append(canonicalMetrics(), diagnosisSignals()...),
	}
	for i, f := range fields {
		if _, dup := c.byID[f.ID]; dup {
			return nil, fmt.Errorf("dcgm field catalogue: duplicate field id %d", f.ID)
		}
		c.byID[f.ID] = i
		for _, n := range f.Names() {
			if _, dup := c.byName[n]; dup {
				return nil, fmt.Errorf("dcgm field catalogue: duplicate name %s", n)
			}
			c.byName[n] = i
		}
	}
	index := make(map[string]int, len(c.Metrics))
	for i, m := range c.Metrics {
		index[string(m.Source)+"\x00"+m.Name] = i
	}
	add := func(m SourceMetric, canonical string) {
		key := string(m.Source) + "\x00" + m.Name
		if i, ok := index[key]; ok {
			if !slices.Contains(c.Metrics[i].Canonical, canonical) {
				c.Metrics[i].Canonical = append(c.Metrics[i].Canonical, canonical)
			}
			return
		}
		m.Canonical = []string{canonical}
		index[key] = len(c.Metrics)
		c.Metrics = append(c.Metrics, m)
	}
	for _, cm := range c.Canonical {
		display := cm.DisplayName()
		for _, t := range cm.Terms {
			for _, id := range t.FieldIDs {
				f, ok := c.Field(id)
				if !ok {
					return nil, fmt.Errorf("canonical %s: unknown dcgm field id %d", cm.Name, id)
				}
				for _, n := range f.Names() {
					add(SourceMetric{Name: n, Source: SourceDCGM, Versions: t.Versions, Type: f.Type, Unit: f.Unit, Note: fmt.Sprintf("DCGM field %d", id)}, display)
				}
			}
			if t.Metric != "" && t.Source != "" {
				add(SourceMetric{Name: t.Metric, Source: t.Source, Versions: t.Versions, Type: t.sourceType(), Unit: t.Unit, Note: t.Note}, display)
				for _, d := range t.Den {
					add(SourceMetric{Name: d, Source: t.Source, Versions: t.Versions, Type: "counter", Unit: t.Unit}, display)
				}
			}
		}
	}
	c.gauges = c.gaugeNames()
	if c.expositions, err = c.buildExpositions(); err != nil {
		return nil, err
	}
	return c, nil
}

// IsGauge reports whether the catalogue knows the metric name and types it
// gauge wherever it knows it: as a DCGM field (under any spelling, whether or
// not a canonical series uses it) and in every source's metric list. Every
// other name is not a gauge: counters, histogram families and their _bucket,
// _sum and _count series, DCGM "label" fields, names the catalogue does not
// know. The answer depends on the name and this catalogue alone, which is
// what rollup windows need (downsample.Config.KindOf).
func (c *Catalogue) IsGauge(name string) bool {
	_, ok := c.gauges[name]
	return ok
}

// gaugeNames is the set of names IsGauge accepts, built once: a map lookup per
// series instead of Lookup's scan of every entry. Only names the catalogue
// lists (DCGM fields under every spelling, source metrics) can be gauges: for
// any other name FieldByName finds nothing and Lookup finds only a histogram
// family (a _bucket, _sum or _count series), so testing the listed names is
// testing them all.
func (c *Catalogue) gaugeNames() map[string]struct{} {
	var names []string
	for _, f := range c.Fields {
		names = append(names, f.Names()...)
	}
	for _, m := range c.Metrics {
		names = append(names, m.Name)
	}
	out := map[string]struct{}{}
	for _, n := range names {
		if c.listedGauge(n) {
			out[n] = struct{}{}
		}
	}
	return out
}

// listedGauge reports whether c knows name and types it gauge wherever it
// knows it.
func (c *Catalogue) listedGauge(name string) bool {
	known := false
	if f, ok := c.FieldByName(name); ok {
		if f.Type != "gauge" {
			return false
		}
		known = true
	}
	for _, m := range c.Lookup(name) {
		if m.Type != "gauge" {
			return false
		}
		known = true
	}
	return known
}

// Field returns the DCGM field with the given ID.
func (c *Catalogue) Field(id int) (Field, bool) {
	i, ok := c.byID[id]
	if !ok {
		return Field{}, false
	}
	return c.Fields[i], true
}

// FieldByName returns the DCGM field exposed under name (any spelling).
func (c *Catalogue) FieldByName(name string) (Field, bool) {
	i, ok := c.byName[name]
	if !ok {
		return Field{}, false
	}
	return c.Fields[i], true
}

// Lookup returns the catalogue entries for an exposed metric name. For a
// histogram the family name is tried after stripping _bucket, _sum or _count.
func (c *Catalogue) Lookup(name string) []SourceMetric {
	var out []SourceMetric
	for _, family := range familyCandidates(name) {
		for _, m := range c.Metrics {
			if m.Name == family && (family == name || m.Type == "histogram") {
				out = append(out, m)
			}
		}
		if len(out) > 0 {
			return out
		}
	}
	return nil
}

func familyCandidates(name string) []string {
	out := []string{name}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if len(name) > len(suf) && strings.HasSuffix(name, suf) {
			out = append(out, name[:len(name)-len(suf)])
		}
	}
	return out
}

var errFieldsHeader = errors.New("unexpected header")

func parseFieldsCSV(b []byte) ([]Field, error) {
	r := csv.NewReader(bytes.NewReader(b))
	r.FieldsPerRecord = 7
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("read header: %w", err)
	}
	want := []string{"field_id", "legacy_name", "dcgm46_name", "exporter_1x_name", "type", "unit", "help"}
	if !slices.Equal(header, want) {
		return nil, fmt.Errorf("%w %v", errFieldsHeader, header)
	}
	var fields []Field
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read field: %w", err)
		}
		id, err := strconv.Atoi(rec[0])
		if err != nil {
			return nil, fmt.Errorf("field id %q: %w", rec[0], err)
		}
		switch rec[4] {
		case "gauge", "counter", "label":
		default:
			return nil, fmt.Errorf("field %d: unknown type %q", id, rec[4])
		}
		fields = append(fields, Field{ID: id, Legacy: rec[1], DCGM46: rec[2], Exporter1x: rec[3], Type: rec[4], Unit: rec[5], Help: rec[6]})
	}
	return fields, nil
}

// labelAliases lists the label spellings that changed between exporter versions.
func labelAliases() []LabelAlias {
	return []LabelAlias{
		{SourceDCGM, "Hostname", "hostname", "releases up to 4.5.3-4.8.2 emit Hostname; HEAD (#655) emits hostname"},
		{SourceDCGM, "uuid", "UUID", "--use-old-namespace"},
		{SourceDCGM, "pod_name", "pod", "old Kubernetes attribute names"},
		{SourceDCGM, "pod_namespace", "namespace", "old Kubernetes attribute names"},
		{SourceDCGM, "container_name", "container", "old Kubernetes attribute names"},
		{SourceDCGM, "exported_pod", "pod", "a Prometheus scraping dcgm-exporter with honor_labels: false (a ServiceMonitor's default) renames its pod attribution so, the exporter's own pod taking pod"},
		{SourceDCGM, "exported_namespace", "namespace", "the same, for the namespace"},
		{SourceDCGM, "exported_container", "container", "the same, for the container"},
		{SourceTriton, "model", "model_name", "Triton labels models as model/version"},
	}
}

// Aliases returns the label aliases that apply to src.
func (c *Catalogue) Aliases(src Source) []LabelAlias {
	var out []LabelAlias
	for _, a := range c.LabelAliases {
		if a.Source == src {
			out = append(out, a)
		}
	}
	return out
}

// TypeOf returns the type the catalogue gives a metric name: "gauge" when
// IsGauge says so (the rollups' typing), else the type of its DCGM field or
// of its source metric entries ("counter", "histogram"; a _bucket, _sum or
// _count series gets its histogram family's), or "" for a name it does not
// know. strata export decides a metric's columns from it.
func (c *Catalogue) TypeOf(name string) string {
	if c.IsGauge(name) {
		return "gauge"
	}
	if f, ok := c.FieldByName(name); ok {
		return f.Type
	}
	for _, m := range c.Lookup(name) {
		return m.Type
	}
	return ""
}
