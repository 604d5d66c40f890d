package export

import (
	"testing"
	"time"
)

// TestCalendarStepsFollowTheTimeZone: 1d steps run midnight to midnight in
// the time zone (23 and 25 hours across DST changes), 1w steps Monday to
// Monday, and a range is widened to whole steps.
func TestCalendarStepsFollowTheTimeZone(t *testing.T) {
	berlin, err := time.LoadLocation("Europe/Berlin")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	kolkata, err := time.LoadLocation("Asia/Kolkata")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	utc := func(s string) int64 {
		tm, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return tm.UnixMilli()
	}
	cases := []struct {
		name     string
		step     string
		loc      *time.Location
		from, to string
		want     []string // step starts, then the last step's end
	}{
		{"spring forward", "1d", berlin, "2026-03-28T12:00:00Z", "2026-03-30T12:00:00Z",
			[]string{"2026-03-27T23:00:00Z", "2026-03-28T23:00:00Z", "2026-03-29T22:00:00Z", "2026-03-30T22:00:00Z"}},
		{"fall back", "1d", berlin, "2026-10-25T00:00:00Z", "2026-10-25T23:00:00Z",
			[]string{"2026-10-24T22:00:00Z", "2026-10-25T23:00:00Z"}},
		{"week from Monday", "1w", berlin, "2026-03-25T00:00:00Z", "2026-04-01T00:00:00Z",
			[]string{"2026-03-22T23:00:00Z", "2026-03-29T22:00:00Z", "2026-04-05T22:00:00Z"}},
		{"half-hour offset", "1d", kolkata, "2026-01-05T00:00:00Z", "2026-01-06T00:00:00Z",
			[]string{"2026-01-04T18:30:00Z", "2026-01-05T18:30:00Z", "2026-01-06T18:30:00Z"}},
		{"fixed steps ignore the zone", "6h", berlin, "2026-03-29T01:00:00Z", "2026-03-29T13:00:00Z",
			[]string{"2026-03-29T00:00:00Z", "2026-03-29T06:00:00Z", "2026-03-29T12:00:00Z", "2026-03-29T18:00:00Z"}},
	}
	for _, c := range cases {
		st, err := parseStep(c.step, c.loc)
		if err != nil {
			t.Fatal(err)
		}
		got := st.steps(utc(c.from), utc(c.to))
		if len(got) != len(c.want)-1 {
			t.Errorf("%s: %d steps %v, want %d", c.name, len(got), got, len(c.want)-1)
			continue
		}
		for i, s := range got {
			if s.start != utc(c.want[i]) || s.end != utc(c.want[i+1]) {
				t.Errorf("%s: step %d is %s to %s, want %s to %s", c.name, i, fmtTime(s.start), fmtTime(s.end), c.want[i], c.want[i+1])
			}
		}
	}
}
