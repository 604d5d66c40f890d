package tiers

// WithMaxWindows replaces NewStitched's bound on the rollup windows one
// Select holds, so that a test reaches it with a few windows.
func WithMaxWindows(n int) StitchOption { return func(s *Stitched) { s.maxWindows = max(n, 0) } }
