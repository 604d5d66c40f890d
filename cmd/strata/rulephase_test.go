package main

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/prometheus/rules"

	"github.com/strata-dev/strata/diagnose"
)

// fakeMarks is a MarkSource whose mark the test sets.
type fakeMarks struct{ mark int64 }

func (f *fakeMarks) Mark() (int64, bool)           { return f.mark, f.mark != 0 }
func (f *fakeMarks) MarkAdvanced() <-chan struct{} { return nil }

// engineMinute has p observe one live minute of the engine, from start
// (the mark read that made minute m final) to end (its sink update).
func engineMinute(p *rulePhase, src diagnose.MarkSource, f *fakeMarks, m int64, start, end time.Time) {
	f.mark = (m + 1) * time.Minute.Milliseconds()
	p.now = func() time.Time { return start }
	src.Mark()
	p.now = func() time.Time { return end }
	p.Update(diagnose.Update{T: time.UnixMilli(m * time.Minute.Milliseconds())})
}

func TestPhasePeriod(t *testing.T) {
	for _, c := range []struct{ interval, want time.Duration }{
		{15 * time.Second, 15 * time.Second},
		{time.Minute, time.Minute},
		{45 * time.Second, 15 * time.Second},
		{90 * time.Second, 30 * time.Second},
		{2 * time.Minute, time.Minute},
		{7 * time.Second, time.Second},
	} {
		if got := phasePeriod(c.interval); got != c.want {
			t.Errorf("phasePeriod(%s) = %s, want %s", c.interval, got, c.want)
		}
	}
}

// The canonical evaluations are put half a period from the middle of the
// engine's minute, stay evenly spaced while the engine's phase moves a
// little, follow it when it moves more, and always go forward.
func TestRulePhaseSlot(t *testing.T) {
	const interval = 15 * time.Second
	base := time.Unix(1_800_000_000, 0) // a whole minute
	if base.Truncate(time.Minute) != base {
		t.Fatal("base is not a whole minute")
	}
	p := newRulePhase("canonical.rules.yml")
	f := &fakeMarks{}
	src := p.marks(f)

	// Nothing seen: Prometheus' slot stands.
	ts := base.Add(8*time.Second + 100*time.Millisecond)
	if got := p.slot(ts, interval, time.Second); !got.Equal(ts) {
		t.Fatalf("no engine minute seen: slot %s, want %s", got, ts)
	}
	// The first mark is the warm-up's; its minute's start is not taken.
	engineMinute(p, src, f, 100, base.Add(2*time.Second), base.Add(20*time.Second))
	if got := p.slot(ts, interval, time.Second); !got.Equal(ts) {
		t.Fatalf("only the warm-up seen: slot %s, want %s", got, ts)
	}
	// A warm-up update is no end either.
	p.Update(diagnose.Update{WarmingUp: true})

	// A live minute from :02 to :06 (middle :04): a group taking 1 s
	// starts at :11 mod 15 (its middle :11.5, 7.5 s from the engine's).
	m0 := base.Add(time.Minute)
	engineMinute(p, src, f, 101, m0.Add(2*time.Second), m0.Add(6*time.Second))
	at := p.slot(m0.Add(8*time.Second), interval, time.Second)
	if want := m0.Add(11 * time.Second); !at.Equal(want) {
		t.Fatalf("slot %s, want %s", at.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano))
	}
	// The next scheduled time gets the next slot, one interval later.
	if next := p.slot(m0.Add(23*time.Second), interval, time.Second); !next.Equal(at.Add(interval)) {
		t.Fatalf("next slot %s, want %s", next.Format(time.RFC3339Nano), at.Add(interval).Format(time.RFC3339Nano))
	}
	// A scheduled time at the slot evaluates at it, without waiting.
	if got := p.slot(m0.Add(26*time.Second), interval, time.Second); !got.Equal(m0.Add(26 * time.Second)) {
		t.Fatalf("scheduled at the slot: %s", got.Format(time.RFC3339Nano))
	}

	// The engine's next minute 1 s later: within a tenth of the period,
	// the offset stays.
	m1 := base.Add(2 * time.Minute)
	engineMinute(p, src, f, 102, m1.Add(3*time.Second), m1.Add(7*time.Second))
	if got := p.slot(m1.Add(8*time.Second), interval, time.Second); !got.Equal(m1.Add(11 * time.Second)) {
		t.Fatalf("after a small move: slot %s, want :11", got.Format(time.RFC3339Nano))
	}
	// 5 s later: it follows (middle :09, slot :09 + 7.5 - 0.5 = :16).
	m2 := base.Add(3 * time.Minute)
	engineMinute(p, src, f, 103, m2.Add(7*time.Second), m2.Add(11*time.Second))
	prev := m2.Add(-4 * time.Second) // the last slot at the old offset (:56)
	got := p.slot(m2.Add(8*time.Second), interval, time.Second)
	if want := m2.Add(16 * time.Second); !got.Equal(want) {
		t.Fatalf("after a large move: slot %s, want %s", got.Format(time.RFC3339Nano), want.Format(time.RFC3339Nano))
	}
	if !got.After(prev) {
		t.Fatalf("slot %s not after the previous %s", got, prev)
	}

	// An engine minute longer than the period counts as one period.
	m3 := base.Add(4 * time.Minute)
	engineMinute(p, src, f, 104, m3.Add(1*time.Second), m3.Add(40*time.Second))
	if got := p.slot(m3.Add(50*time.Second), interval, 0); !got.Equal(m3.Add(61 * time.Second)) {
		t.Fatalf("long engine minute: slot %s, want %s", got.Format(time.RFC3339Nano), m3.Add(61*time.Second).Format(time.RFC3339Nano))
	}
}

// Over any schedule of the group and any moves of the engine, the slots
// go strictly forward and none is more than a period after its scheduled
// time.
func TestRulePhaseSlotsForward(t *testing.T) {
	const interval = 15 * time.Second
	p := newRulePhase("canonical.rules.yml")
	f := &fakeMarks{}
	src := p.marks(f)
	base := time.Unix(1_800_000_000, 0)
	var last time.Time
	ts := base.Add(3 * time.Second)
	for m := int64(0); m < 200; m++ {
		start := base.Add(time.Duration(m)*time.Minute + time.Duration(m*7919%60_000)*time.Millisecond)
		engineMinute(p, src, f, 30_000_000+m, start, start.Add(time.Duration(m*104729%9_000)*time.Millisecond))
		for range 4 {
			at := p.slot(ts, interval, time.Duration(m%3)*time.Second)
			if at.Before(ts) || at.Sub(ts) >= phasePeriod(interval) {
				t.Fatalf("slot %s for %s", at, ts)
			}
			if !last.IsZero() && !at.After(last) {
				t.Fatalf("slot %s not after %s", at, last)
			}
			last = at
			ts = ts.Add(interval)
		}
	}
}

// The canonical group waits for its slot and is evaluated at it; another
// group is not; stop ends a wait without an evaluation.
func TestRulePhaseIteration(t *testing.T) {
	const interval = 15 * time.Second
	base := time.Unix(1_800_000_000, 0)
	p := newRulePhase("canonical.rules.yml")
	f := &fakeMarks{}
	src := p.marks(f)
	engineMinute(p, src, f, 100, base.Add(-time.Minute), base.Add(-time.Minute))
	engineMinute(p, src, f, 101, base.Add(2*time.Second), base.Add(6*time.Second))
	now := base.Add(8 * time.Second)
	p.now = func() time.Time { return now }
	var waited []time.Duration
	p.after = func(d time.Duration) <-chan time.Time {
		waited = append(waited, d)
		c := make(chan time.Time, 1)
		c <- now.Add(d)
		return c
	}
	var evaluated []time.Time
	iter := p.iterationFunc(func(_ context.Context, _ *rules.Group, ts time.Time) { evaluated = append(evaluated, ts) })
	canonical := rules.NewGroup(rules.GroupOptions{Name: "strata_canonical", File: "canonical.rules.yml", Interval: interval})
	other := rules.NewGroup(rules.GroupOptions{Name: "mine", File: "mine.yml", Interval: interval})

	iter(context.Background(), canonical, now)
	// GetEvaluationTime is 0 for a new group: its start at the middle, :11.5.
	if want := base.Add(11*time.Second + 500*time.Millisecond); len(evaluated) != 1 || !evaluated[0].Equal(want) {
		t.Fatalf("canonical evaluated at %v, want %s", evaluated, want)
	}
	if len(waited) != 1 || waited[0] != 3500*time.Millisecond {
		t.Fatalf("waited %v, want [3.5s]", waited)
	}
	iter(context.Background(), other, now)
	if len(evaluated) != 2 || !evaluated[1].Equal(now) || len(waited) != 1 {
		t.Fatalf("other group: evaluated %v, waited %v", evaluated, waited)
	}

	p.after = func(time.Duration) <-chan time.Time { return nil } // never
	p.stop()
	iter(context.Background(), canonical, now.Add(interval))
	if len(evaluated) != 2 {
		t.Fatalf("evaluated after stop: %v", evaluated)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	q := newRulePhase("canonical.rules.yml")
	q.start, q.end, q.dur, q.now, q.after = p.start, p.end, p.dur, p.now, p.after
	q.iterationFunc(func(context.Context, *rules.Group, time.Time) { t.Fatal("evaluated with its context done") })(ctx, canonical, now)
}
