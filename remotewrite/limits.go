package remotewrite

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
)

// Rejection reasons, the values of the reason label of
// strata_remotewrite_rejected_total. They are stable: dashboards and alerts
// select on them, and the scraper (dcgmbridge/scrape) reports its own rejections with
// the same words.
const (
	ReasonBodyTooLarge         = "body_too_large"
	ReasonDecompressedTooLarge = "decompressed_too_large"
	ReasonBadSnappy            = "bad_snappy"
	ReasonBadProtobuf          = "bad_protobuf"
	ReasonOverload             = "overload"
	ReasonHeapLimit            = "heap_limit"
	ReasonDiskSpace            = "disk_space_low"
	ReasonQueueTimeout         = "queue_timeout"
	ReasonTooManyLabels        = "too_many_labels"
	ReasonLabelNameTooLong     = "label_name_too_long"
	ReasonLabelValueTooLong    = "label_value_too_long"
	ReasonInvalidLabels        = "invalid_labels"
	ReasonMissingName          = "missing_metric_name"
	ReasonDuplicateLabel       = "duplicate_label_name"
	ReasonBadSymbolRef         = "bad_symbol_ref"
	ReasonEmptySeries          = "empty_series"
	ReasonTooFarInFuture       = "too_far_in_future"
	ReasonTooOld               = "too_old"
	ReasonOutOfOrder           = "out_of_order"
	ReasonDuplicateTimestamp   = "duplicate_timestamp"
	ReasonBadHistogram         = "bad_histogram"
	ReasonBadExemplar          = "bad_exemplar"
	ReasonUnsupportedMedia     = "unsupported_media_type"
)

// rejectionReasons lists every reason, so that each series of
// strata_remotewrite_rejected_total exists at 0 from the start: rate() and
// dashboards then see "no rejections" rather than "no data".
var rejectionReasons = []string{
	ReasonBodyTooLarge, ReasonDecompressedTooLarge, ReasonBadSnappy, ReasonBadProtobuf, ReasonOverload, ReasonHeapLimit, ReasonQueueTimeout,
	ReasonTooManyLabels, ReasonLabelNameTooLong, ReasonLabelValueTooLong, ReasonInvalidLabels, ReasonMissingName,
	ReasonDuplicateLabel, ReasonBadSymbolRef, ReasonEmptySeries, ReasonTooFarInFuture, ReasonTooOld,
	ReasonOutOfOrder, ReasonDuplicateTimestamp, ReasonBadHistogram, ReasonBadExemplar, ReasonUnsupportedMedia,
}

// Validation errors returned by Limits' checks. The handler wraps them with the
// series they concern; callers match them with errors.Is.
var (
	// ErrInvalidLabels covers every label-set problem: too many labels, a name
	// or value over its length limit, an empty name, a repeated name, a missing
	// __name__ or invalid UTF-8.
	ErrInvalidLabels = errors.New("invalid labels")
	// ErrTooFarInFuture is returned for a timestamp beyond now + MaxFutureSkew.
	ErrTooFarInFuture = errors.New("timestamp too far in the future")
)

// Limits bounds what one series may look like. The zero value of a field means
// "no limit" for that field, except that label names must always be non-empty
// valid UTF-8, unique, and __name__ must be present and non-empty.
//
// Limits is shared by the remote-write handler and the scraper so that data
// arriving either way passes the same validation; keep its method signatures
// stable.
type Limits struct {
	// MaxLabelsPerSeries bounds the labels of one series, __name__ included.
	MaxLabelsPerSeries int
	// MaxLabelNameLength bounds a label name, in bytes.
	MaxLabelNameLength int
	// MaxLabelValueLength bounds a label value, in bytes (__name__'s too).
	MaxLabelValueLength int
	// MaxFutureSkew is how far beyond the receiver's clock a timestamp may be.
	MaxFutureSkew time.Duration
}

// DefaultLimits returns the receiver's default limits, documented on
// Config.Limits.
func DefaultLimits() Limits {
	return Limits{
		MaxLabelsPerSeries:  64,
		MaxLabelNameLength:  1024,
		MaxLabelValueLength: 4096,
		MaxFutureSkew:       10 * time.Minute,
	}
}

// WithDefaults returns l with every limit that is zero or negative replaced by
// its default, as NewHandler does, so a limit cannot be switched off by
// forgetting it.
func (l Limits) WithDefaults() Limits {
	d := DefaultLimits()
	if l.MaxLabelsPerSeries <= 0 {
		l.MaxLabelsPerSeries = d.MaxLabelsPerSeries
	}
	if l.MaxLabelNameLength <= 0 {
		l.MaxLabelNameLength = d.MaxLabelNameLength
	}
	if l.MaxLabelValueLength <= 0 {
		l.MaxLabelValueLength = d.MaxLabelValueLength
	}
	if l.MaxFutureSkew <= 0 {
		l.MaxFutureSkew = d.MaxFutureSkew
	}
	return l
}

// CheckSeries validates a label set that is already sorted by name, as
// labels.Labels built by a ScratchBuilder after Sort or by labels.New are. It
// returns "" and nil when the set is acceptable, or one of the Reason*
// constants and an error wrapping ErrInvalidLabels that names the problem.
// Labels with an empty value are treated as absent, as Prometheus does.
// CheckSeries does not allocate when the set is valid.
func (l Limits) CheckSeries(lbls labels.Labels) (reason string, err error) {
	var c labelChecker
	lbls.Range(func(lb labels.Label) {
		if c.reason == "" {
			c.check(l, lb.Name, lb.Value)
		}
	})
	return c.finish(l)
}

// CheckTimestamp rejects a sample timestamp (ms since the epoch) more than
// MaxFutureSkew ahead of now: such a sample would move the TSDB head far ahead
// and make every honest sample after it "too old". A zero MaxFutureSkew
// disables the check.
func (l Limits) CheckTimestamp(t int64, now time.Time) (reason string, err error) {
	if t <= l.newestAllowed(now) {
		return "", nil
	}
	return ReasonTooFarInFuture, fmt.Errorf("%w: %s is more than %s ahead of the receiver's clock",
		ErrTooFarInFuture, time.UnixMilli(t).UTC().Format(time.RFC3339Nano), l.MaxFutureSkew)
}

// newestAllowed returns the newest timestamp CheckTimestamp accepts at now,
// so that a request's samples are compared with it rather than each
// computing it again.
func (l Limits) newestAllowed(now time.Time) int64 {
	if l.MaxFutureSkew <= 0 {
		return math.MaxInt64
	}
	return now.Add(l.MaxFutureSkew).UnixMilli()
}

// labelChecker walks a sorted label set one label at a time, so that the
// handler (which holds zero-copy views, not labels.Labels) and CheckSeries
// share one implementation.
type labelChecker struct {
	n       int
	prev    string
	hasPrev bool
	hasName bool
	reason  string
	err     error
}

func (c *labelChecker) fail(reason string, format string, args ...any) {
	c.reason = reason
	c.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidLabels}, args...)...)
}

// check inspects one label; labels must come in ascending name order.
func (c *labelChecker) check(l Limits, name, value string) {
	if value == "" {
		return // an empty value means the label is absent
	}
	c.n++
	switch {
	case name == "":
		c.fail(ReasonInvalidLabels, "empty label name")
		return
	case l.MaxLabelNameLength > 0 && len(name) > l.MaxLabelNameLength:
		c.fail(ReasonLabelNameTooLong, "label name %s is %d bytes long, the limit is %d", quoteTrunc(name), len(name), l.MaxLabelNameLength)
		return
	case l.MaxLabelValueLength > 0 && len(value) > l.MaxLabelValueLength:
		c.fail(ReasonLabelValueTooLong, "value of label %s is %d bytes long, the limit is %d", quoteTrunc(name), len(value), l.MaxLabelValueLength)
		return
	case c.hasPrev && c.prev == name:
		c.fail(ReasonDuplicateLabel, "duplicate label name %s", quoteTrunc(name))
		return
	case !utf8.ValidString(name):
		c.fail(ReasonInvalidLabels, "label name %s is not valid UTF-8", quoteTrunc(name))
		return
	case !utf8.ValidString(value):
		c.fail(ReasonInvalidLabels, "value of label %s is not valid UTF-8", quoteTrunc(name))
		return
	}
	if name == model.MetricNameLabel {
		c.hasName = true
	}
	c.prev, c.hasPrev = name, true
}

func (c *labelChecker) finish(l Limits) (string, error) {
	if c.reason != "" {
		return c.reason, c.err
	}
	if !c.hasName {
		return ReasonMissingName, fmt.Errorf("%w: missing or empty __name__", ErrInvalidLabels)
	}
	if l.MaxLabelsPerSeries > 0 && c.n > l.MaxLabelsPerSeries {
		return ReasonTooManyLabels, fmt.Errorf("%w: %d labels, the limit is %d", ErrInvalidLabels, c.n, l.MaxLabelsPerSeries)
	}
	return "", nil
}

// quoteTrunc quotes s for an error message, cut to a readable length so that
// a 1 MiB label value cannot blow up a response body or a log line.
func quoteTrunc(s string) string {
	const maxLen = 64
	if len(s) <= maxLen {
		return strconv.Quote(s)
	}
	cut := maxLen
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	var b strings.Builder
	b.WriteString(strconv.Quote(s[:cut]))
	b.WriteString("...")
	return b.String()
}
