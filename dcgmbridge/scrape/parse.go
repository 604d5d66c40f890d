package scrape

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/textparse"
	"github.com/prometheus/prometheus/model/value"

	"github.com/strata-dev/strata/remotewrite"
)

// Scrape failure reasons: the reason label of
// strata_dcgmbridge_scrape_failures_total. Label problems reuse
// remotewrite.Limits' reasons (remotewrite's Reason* words), so both ingest
// paths count alike.
const (
	ReasonHTTP            = "http_error"
	ReasonTimeout         = "timeout"
	ReasonBodyTooLarge    = "body_too_large"
	ReasonLineTooLong     = "line_too_long"
	ReasonParse           = "parse_error"
	ReasonContentType     = "content_type"
	ReasonDuplicateSeries = "duplicate_series"
	ReasonWrongType       = "wrong_type"
	ReasonTooManySamples  = "too_many_samples"
	ReasonAppend          = "append_error"
	ReasonTimestamp       = "bad_timestamp"
)

// ErrRejected is wrapped by every parse rejection; a rejected body appends
// nothing.
var ErrRejected = errors.New("exposition rejected")

// ParseLimits bound one exposition body.
type ParseLimits struct {
	// MaxSamples in one body (0 = no limit).
	MaxSamples int
	// MaxLineBytes is the longest accepted line (0 = no limit).
	MaxLineBytes int
}

// rejectError carries the failure reason of a rejected body.
type rejectError struct {
	reason string
	err    error
}

func (e *rejectError) Error() string { return e.reason + ": " + e.err.Error() }
func (e *rejectError) Unwrap() []error {
	return []error{ErrRejected, e.err}
}

func reject(reason string, format string, args ...any) error {
	return &rejectError{reason: reason, err: fmt.Errorf(format, args...)}
}

// RejectReason returns the failure reason of an error from ParseExposition,
// or "" if err is not a rejection.
func RejectReason(err error) string {
	var re *rejectError
	if errors.As(err, &re) {
		return re.reason
	}
	return ""
}

// Sample is one parsed float sample. Exposed timestamps are ignored: every
// sample of a scrape gets the scrape's time (dcgm-exporter and vLLM emit none).
type Sample struct {
	Labels labels.Labels
	Value  float64
}

// Exposition is a fully parsed and validated body.
type Exposition struct {
	Samples []Sample
	// Metadata is what the body says of its families (# TYPE, # HELP,
	// # UNIT), by family name as written there.
	Metadata map[string]remotewrite.Metadata
	// Sentinels counts the DCGM sentinel values dropped, per field.
	Sentinels map[string]int
}

// ExpositionParser parses scrape bodies. It holds no per-body state and is
// safe for concurrent use.
type ExpositionParser struct {
	Limits ParseLimits
	// Series is the remote-write receiver's series validation, applied to
	// every series with the target's labels added. Its zero value still
	// rejects empty, repeated or invalid UTF-8 label names and a missing
	// __name__; its limits are off.
	Series    remotewrite.Limits
	Sentinels *SentinelFilter // may be nil: then sentinels are kept
}

// Parse parses body (Prometheus text or OpenMetrics, by contentType; text when
// it is empty or unknown) and adds target's labels to every series. Target
// labels win over exposed labels of the same name, which are kept as
// exported_<name>, as Prometheus does with honor_labels: false. Parse checks
// the whole body before returning anything: any problem rejects it all.
func (p *ExpositionParser) Parse(body []byte, contentType string, target labels.Labels, now time.Time) (*Exposition, error) {
	if p.Limits.MaxLineBytes > 0 {
		if n := longestLine(body); n > p.Limits.MaxLineBytes {
			return nil, reject(ReasonLineTooLong, "a line is %d bytes long, the limit is %d", n, p.Limits.MaxLineBytes)
		}
	}
	tp, err := textparse.New(body, contentType, labels.NewSymbolTable(), textparse.ParserOptions{
		OpenMetricsSkipSTSeries: true,
		FallbackContentType:     "text/plain",
	})
	if tp == nil {
		return nil, reject(ReasonContentType, "no parser for content type %q: %w", contentType, err)
	}
	out := &Exposition{}
	types := map[string]model.MetricType{}
	// setMeta records one of a family's # TYPE, # HELP or # UNIT lines.
	setMeta := func(name []byte, set func(*remotewrite.Metadata)) {
		if out.Metadata == nil {
			out.Metadata = map[string]remotewrite.Metadata{}
		}
		m := out.Metadata[string(name)]
		set(&m)
		out.Metadata[string(name)] = m
	}
	seen := map[uint64]struct{}{}
	var (
		lset labels.Labels
		b    = labels.NewScratchBuilder(16)
	)
	for {
		entry, err := tp.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, reject(ReasonParse, "%w", err)
		}
		switch entry {
		case textparse.EntryType:
			name, typ := tp.Type()
			if prev, dup := types[string(name)]; dup && prev != typ {
				return nil, reject(ReasonWrongType, "metric family %s declared as %s and %s", name, prev, typ)
			}
			types[string(name)] = typ
			setMeta(name, func(m *remotewrite.Metadata) { m.Type = typ })
			continue
		case textparse.EntryHelp:
			name, help := tp.Help()
			setMeta(name, func(m *remotewrite.Metadata) { m.Help = string(help) })
			continue
		case textparse.EntryUnit:
			name, unit := tp.Unit()
			setMeta(name, func(m *remotewrite.Metadata) { m.Unit = string(unit) })
			continue
		case textparse.EntryHistogram:
			return nil, reject(ReasonWrongType, "native histograms are not accepted from scrapes")
		case textparse.EntrySeries:
		default:
			continue
		}
		_, _, v := tp.Series()
		tp.Labels(&lset)
		name := lset.Get(model.MetricNameLabel)
		if err := checkType(types, name, lset, v); err != nil {
			return nil, err
		}
		if p.Sentinels != nil {
			if field, drop := p.Sentinels.classify(name, v); drop {
				if out.Sentinels == nil {
					out.Sentinels = map[string]int{}
				}
				out.Sentinels[field]++
				continue
			}
		}
		full := withTargetLabels(&b, lset, target)
		h := full.Hash()
		if _, dup := seen[h]; dup {
			return nil, reject(ReasonDuplicateSeries, "series %s appears twice", truncate(full.String()))
		}
		seen[h] = struct{}{}
		if reason, err := p.Series.CheckSeries(full); reason != "" {
			return nil, &rejectError{reason: reason, err: err}
		}
		if p.Limits.MaxSamples > 0 && len(out.Samples) >= p.Limits.MaxSamples {
			return nil, reject(ReasonTooManySamples, "more than %d samples", p.Limits.MaxSamples)
		}
		out.Samples = append(out.Samples, Sample{Labels: full, Value: v})
	}
	if reason, err := p.Series.CheckTimestamp(now.UnixMilli(), now); reason != "" {
		return nil, &rejectError{reason: ReasonTimestamp, err: err}
	}
	return out, nil
}

// checkType rejects a sample its family's declared type cannot produce.
func checkType(types map[string]model.MetricType, name string, lset labels.Labels, v float64) error {
	if value.IsStaleNaN(v) {
		return reject(ReasonWrongType, "%s: an exposition may not contain stale markers", name)
	}
	if typ, ok := types[name]; ok {
		if typ == model.MetricTypeCounter && v < 0 {
			return reject(ReasonWrongType, "counter %s is negative (%g)", name, v)
		}
		return nil
	}
	for _, suffix := range []string{"_bucket", "_count", "_sum", "_total", "_created", "_gcount", "_gsum"} {
		family, ok := cutSuffix(name, suffix)
		if !ok {
			continue
		}
		switch types[family] {
		case model.MetricTypeHistogram, model.MetricTypeGaugeHistogram:
			if suffix == "_bucket" {
				le := lset.Get(model.BucketLabel)
				if _, err := strconv.ParseFloat(le, 64); err != nil {
					return reject(ReasonWrongType, "histogram bucket %s has le=%q", name, le)
				}
			}
			if suffix != "_sum" && suffix != "_gsum" && (v < 0 || math.IsNaN(v)) {
				return reject(ReasonWrongType, "histogram %s count is %g", name, v)
			}
		case model.MetricTypeCounter:
			if v < 0 {
				return reject(ReasonWrongType, "counter %s is negative (%g)", name, v)
			}
		}
		return nil
	}
	return nil
}

// withTargetLabels returns lset plus the target's labels; an exposed label
// that a target label overrides is kept as exported_<name>.
func withTargetLabels(b *labels.ScratchBuilder, lset, target labels.Labels) labels.Labels {
	b.Reset()
	lset.Range(func(l labels.Label) {
		if l.Name != model.MetricNameLabel && target.Has(l.Name) {
			b.Add(model.ExportedLabelPrefix+l.Name, l.Value)
			return
		}
		b.Add(l.Name, l.Value)
	})
	target.Range(func(l labels.Label) { b.Add(l.Name, l.Value) })
	b.Sort()
	return b.Labels()
}

func longestLine(b []byte) int {
	longest := 0
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			i = len(b)
		}
		longest = max(longest, i)
		b = b[min(i+1, len(b)):]
	}
	return longest
}

// cutSuffix cuts suffix off s when s is longer than it.
func cutSuffix(s, suffix string) (string, bool) {
	if len(s) > len(suffix) && s[len(s)-len(suffix):] == suffix {
		return s[:len(s)-len(suffix)], true
	}
	return s, false
}

func truncate(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}
