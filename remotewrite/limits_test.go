package remotewrite

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
)

func TestLimitsCheckSeries(t *testing.T) {
	lim := Limits{MaxLabelsPerSeries: 3, MaxLabelNameLength: 8, MaxLabelValueLength: 10}
	sb := labels.NewScratchBuilder(0)
	build := func(kv ...string) labels.Labels {
		sb.Reset()
		for i := 0; i < len(kv); i += 2 {
			sb.Add(kv[i], kv[i+1])
		}
		sb.Sort()
		return sb.Labels()
	}
	cases := []struct {
		name   string
		lbls   labels.Labels
		reason string
		msg    string
	}{
		{"valid", build("__name__", "up", "job", "a"), "", ""},
		{"utf8 names are valid", build("__name__", "a.b c", "ключ", "знач"), "", ""},
		{"empty value is absent", build("__name__", "up", "job", "a", "x", "", "y", ""), "", ""},
		{"missing name", build("job", "a"), ReasonMissingName, "invalid labels: missing or empty __name__"},
		{"empty name value", build("__name__", "", "job", "a"), ReasonMissingName, "invalid labels: missing or empty __name__"},
		{"empty label name", build("__name__", "up", "", "a"), ReasonInvalidLabels, "invalid labels: empty label name"},
		{"duplicate", build("__name__", "up", "job", "a", "job", "b"), ReasonDuplicateLabel, `invalid labels: duplicate label name "job"`},
		{"too many", build("__name__", "up", "a", "1", "b", "2", "c", "3"), ReasonTooManyLabels, "invalid labels: 4 labels, the limit is 3"},
		{"name too long", build("__name__", "up", "abcdefghi", "1"), ReasonLabelNameTooLong, `invalid labels: label name "abcdefghi" is 9 bytes long, the limit is 8`},
		{"value too long", build("__name__", "up", "a", "01234567890"), ReasonLabelValueTooLong, `invalid labels: value of label "a" is 11 bytes long, the limit is 10`},
		{"bad utf8 value", build("__name__", "up", "a", "\xff"), ReasonInvalidLabels, `invalid labels: value of label "a" is not valid UTF-8`},
		{"bad utf8 name", build("__name__", "up", "\xff", "v"), ReasonInvalidLabels, `invalid labels: label name "\xff" is not valid UTF-8`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reason, err := lim.CheckSeries(tc.lbls)
			if reason != tc.reason {
				t.Fatalf("reason = %q, want %q (err %v)", reason, tc.reason, err)
			}
			if tc.reason == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidLabels) {
				t.Fatalf("error %v does not wrap ErrInvalidLabels", err)
			}
			if err.Error() != tc.msg {
				t.Fatalf("message = %q, want %q", err.Error(), tc.msg)
			}
		})
	}
}

func TestLimitsCheckSeriesNoAlloc(t *testing.T) {
	lim := Limits{MaxLabelsPerSeries: 10, MaxLabelNameLength: 100, MaxLabelValueLength: 100}
	lbls := labels.FromStrings("__name__", "up", "instance", "a:9090", "job", "node")
	allocs := testing.AllocsPerRun(100, func() {
		if r, err := lim.CheckSeries(lbls); r != "" || err != nil {
			t.Fatal(r, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("CheckSeries allocated %.1f times per call for a valid set", allocs)
	}
}

func TestLimitsCheckTimestamp(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	lim := Limits{MaxFutureSkew: 10 * time.Minute}
	cases := []struct {
		name   string
		t      time.Time
		reason string
	}{
		{"now", now, ""},
		{"past", now.Add(-48 * time.Hour), ""},
		{"at the limit", now.Add(10 * time.Minute), ""},
		{"beyond", now.Add(10*time.Minute + time.Millisecond), ReasonTooFarInFuture},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reason, err := lim.CheckTimestamp(tc.t.UnixMilli(), now)
			if reason != tc.reason || (reason != "") != errors.Is(err, ErrTooFarInFuture) {
				t.Fatalf("got %q, %v; want %q", reason, err, tc.reason)
			}
		})
	}
	if r, err := (Limits{}).CheckTimestamp(now.Add(1000*time.Hour).UnixMilli(), now); r != "" || err != nil {
		t.Fatalf("zero skew must disable the check, got %q %v", r, err)
	}
}

func TestQuoteTrunc(t *testing.T) {
	long := strings.Repeat("é", 100)
	got := quoteTrunc(long)
	if len(got) > 70 || !strings.HasSuffix(got, `"...`) {
		t.Fatalf("quoteTrunc(long) = %q", got)
	}
}
