package timegrid

import (
	"math"
	"testing"
)

func TestFloorCeil(t *testing.T) {
	const minute, hour = 60_000, 3_600_000
	cases := []struct {
		t, step     int64
		floor, ceil int64
	}{
		{0, minute, 0, 0},
		{1, minute, 0, minute},
		{minute - 1, minute, 0, minute},
		{minute, minute, minute, minute},
		{hour + 30_000, hour, hour, 2 * hour},
		// Before the epoch: a window still starts at or before its samples.
		{-1, minute, -minute, 0},
		{-minute, minute, -minute, -minute},
		{-minute - 1, minute, -2 * minute, -minute},
		{-hour + 1, hour, -hour, 0},
		// At the ends of int64, the bound saturates instead of wrapping.
		{math.MinInt64, hour, math.MinInt64, math.MinInt64 - math.MinInt64%hour},
		{math.MinInt64 + 1, 2, math.MinInt64, math.MinInt64 + 2},
		{math.MinInt64, 2, math.MinInt64, math.MinInt64},
		{math.MaxInt64, hour, math.MaxInt64 - math.MaxInt64%hour, math.MaxInt64},
		{math.MaxInt64 - 1, 2, math.MaxInt64 - 1, math.MaxInt64 - 1},
		{math.MaxInt64, 1, math.MaxInt64, math.MaxInt64},
	}
	for _, tc := range cases {
		if got := Floor(tc.t, tc.step); got != tc.floor {
			t.Errorf("Floor(%d, %d) = %d, want %d", tc.t, tc.step, got, tc.floor)
		}
		if got := Ceil(tc.t, tc.step); got != tc.ceil {
			t.Errorf("Ceil(%d, %d) = %d, want %d", tc.t, tc.step, got, tc.ceil)
		}
	}
}

// TestFloorCeilProperties checks the defining properties over a sweep of
// timestamps around zero and around the ends of int64.
func TestFloorCeilProperties(t *testing.T) {
	for _, step := range []int64{1, 7, 60_000, 3_600_000, 86_400_000} {
		for _, base := range []int64{0, math.MinInt64 + 3*86_400_000, math.MaxInt64 - 3*86_400_000} {
			for d := -2 * step; d <= 2*step; d += max(step/13, 1) {
				tt := base + d
				f, c := Floor(tt, step), Ceil(tt, step)
				if f > tt || tt-f >= step || f%step != 0 {
					t.Fatalf("Floor(%d, %d) = %d: not the largest multiple at or below", tt, step, f)
				}
				if c < tt || c-tt >= step || c%step != 0 {
					t.Fatalf("Ceil(%d, %d) = %d: not the smallest multiple at or above", tt, step, c)
				}
			}
		}
	}
}
