package main

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/prometheus/rules"

	"github.com/strata-dev/strata/diagnose"
)

// rulePhase keeps the canonical rule group's evaluations away from the
// diagnosis engine's minute. Both allocate in bursts (the canonical group
// 90-140 MB an evaluation at 50,000 paced series, the engine's minute
// 210-310 MB); in the same seconds they share one collection, whose goal
// (GOGC 50) is then set over both bursts and the heap grows to it: the
// paced peak (docs/bench.md, "what makes the paced peak").
//
// Prometheus staggers a group's evaluations by a hash of its name and file
// within the interval, so where the canonical group fell against the
// engine's minute depended on the storage path. The engine runs when the
// rollup pipeline's mark passes a minute (a pipeline tick after the
// allowed lateness), not at a fixed second of the wall-clock minute, so
// the phase is observed, not configured: the engine's Run reads its mark
// through marks (the start of a minute's evaluation) and rulePhase is one
// of its sinks (the end). Each canonical evaluation then waits for the
// offset within its interval that puts its middle half a period (the
// greatest common divisor of the interval and one minute: 15 s at the
// default 15 s interval) from the middle of the engine's last live
// minute, and evaluates at that time, as Prometheus would for a group whose
// hash gave that offset. Until the engine has evaluated a live minute (or
// with the engine off) nothing waits: Prometheus' offset stands.
//
// The offset moves only when the engine's phase moved by more than a tenth
// of the period, so that the evaluations stay evenly spaced.
type rulePhase struct {
	file string // the canonical rule file (the only group phased)

	mu         sync.Mutex
	markMinute int64     // the last mark's minute seen by marks
	start, end time.Time // the engine's last live minute (end before start: running)
	dur        time.Duration
	offset     time.Duration // chosen, in [0, period) from the Unix epoch; -1: none
	period     time.Duration // the period offset is for

	done     chan struct{}
	stopOnce sync.Once
	now      func() time.Time
	after    func(time.Duration) <-chan time.Time
}

// newRulePhase phases the groups of the canonical rule file (file).
func newRulePhase(file string) *rulePhase {
	return &rulePhase{file: file, offset: -1, done: make(chan struct{}), now: time.Now, after: time.After}
}

// stop ends a wait in progress (the group then evaluates nothing) and every
// later one; called before the rule manager stops.
func (p *rulePhase) stop() { p.stopOnce.Do(func() { close(p.done) }) }

// marks returns src, noting when the engine reads a mark that made a new
// minute final: its evaluation of that minute starts then.
func (p *rulePhase) marks(src diagnose.MarkSource) diagnose.MarkSource {
	if p == nil {
		return src
	}
	return phaseMarks{src, p}
}

type phaseMarks struct {
	diagnose.MarkSource
	p *rulePhase
}

func (m phaseMarks) Mark() (int64, bool) {
	mark, ok := m.MarkSource.Mark()
	if ok {
		m.p.observeMark(mark, m.p.now())
	}
	return mark, ok
}

func (p *rulePhase) observeMark(mark int64, now time.Time) {
	minute := mark / time.Minute.Milliseconds()
	p.mu.Lock()
	defer p.mu.Unlock()
	if minute > p.markMinute {
		if p.markMinute != 0 {
			p.start = now
		}
		p.markMinute = minute
	}
}

// Update implements diagnose.Sink: a live minute's evaluation ended.
func (p *rulePhase) Update(u diagnose.Update) {
	if u.WarmingUp {
		return
	}
	now := p.now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.start.IsZero() && now.After(p.start) {
		p.end, p.dur = now, now.Sub(p.start)
	}
}

// phasePeriod is the period at which the canonical group's evaluations and
// the engine's minutes meet again: the greatest common divisor of the
// interval and a minute (for an interval of 15 s, 15 s).
func phasePeriod(interval time.Duration) time.Duration {
	a, b := interval, time.Minute
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// mod is x modulo m in [0, m).
func mod(x, m time.Duration) time.Duration {
	x %= m
	if x < 0 {
		x += m
	}
	return x
}

// slot returns when the evaluation the group scheduled at ts runs: ts, or
// the first time at or after ts at the chosen offset. took is how long the
// group's last evaluation took (its middle, not its start, is placed).
func (p *rulePhase) slot(ts time.Time, interval, took time.Duration) time.Time {
	period := phasePeriod(interval)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.start.IsZero() || p.end.Before(p.start) && p.dur == 0 {
		return ts // no live minute seen yet
	}
	// The middle of the engine's minute, from its last start and the
	// duration of its last finished minute.
	mid := p.start.Add(min(p.dur, period) / 2)
	want := mod(time.Duration(mid.UnixNano())+period/2-min(took, period)/2, period)
	if p.offset < 0 || p.period != period || circular(want-p.offset, period) > period/10 {
		p.offset, p.period = want, period
	}
	return ts.Add(mod(p.offset-time.Duration(ts.UnixNano()), period))
}

// circular is the distance of d from 0 modulo period.
func circular(d, period time.Duration) time.Duration {
	d = mod(d, period)
	return min(d, period-d)
}

// iterationFunc wraps inner: the canonical group's evaluations wait for
// their slot and are evaluated at it; other groups are left alone.
func (p *rulePhase) iterationFunc(inner rules.GroupEvalIterationFunc) rules.GroupEvalIterationFunc {
	if inner == nil {
		inner = rules.DefaultEvalIterationFunc
	}
	return func(ctx context.Context, g *rules.Group, ts time.Time) {
		if g.File() != p.file {
			inner(ctx, g, ts)
			return
		}
		at := p.slot(ts, g.Interval(), g.GetEvaluationTime())
		if wait := at.Sub(p.now()); wait > 0 {
			select {
			case <-p.after(wait):
			case <-ctx.Done():
				return
			case <-p.done:
				return
			}
		}
		inner(ctx, g, at)
	}
}
