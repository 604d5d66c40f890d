package mapped

import (
	"testing"
	"time"
)

// TestTrigger: a release is due once the shared resident set has grown by
// Grow since the last release or Every has passed, not before; growth a
// release did not take back does not make every later poll due.
func TestTrigger(t *testing.T) {
	const mib = 1 << 20
	t0 := time.Unix(1_800_000_000, 0)
	at := t0.Add
	tr := Trigger{Grow: 8 * mib, Every: 15 * time.Second}
	steps := []struct {
		at       time.Duration
		cur      int64
		due      bool
		released int64 // the resident set after the release, when due
	}{
		{0, 70 * mib, false, 0},                      // the first poll sets the baseline
		{100 * time.Millisecond, 77 * mib, false, 0}, // 7 MiB: below Grow
		{200 * time.Millisecond, 78 * mib, true, 71 * mib},
		{300 * time.Millisecond, 78 * mib, false, 0}, // 7 MiB above the new baseline
		{400 * time.Millisecond, 200 * mib, true, 90 * mib},
		// 90 MiB stayed after it (not the chunk files' pages): the new
		// baseline, so the next polls are not due
		{500 * time.Millisecond, 91 * mib, false, 0},
		{10 * time.Second, 97 * mib, false, 0},
		{15*time.Second + 399*time.Millisecond, 97 * mib, false, 0},
		{15*time.Second + 400*time.Millisecond, 97 * mib, true, 96 * mib}, // Every since the last release
		{16 * time.Second, 0, false, 0},                                   // unreadable: time only
		{30*time.Second + 400*time.Millisecond, 0, true, 0},
	}
	for _, s := range steps {
		if got := tr.Due(at(s.at), s.cur); got != s.due {
			t.Fatalf("at %v with %d MiB: due %v, want %v", s.at, s.cur/mib, got, s.due)
		}
		if s.due {
			tr.Released(at(s.at), s.released)
		}
	}
}
