package backfill

import (
	"context"
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"

	"github.com/strata-dev/strata/internal/timegrid"
	"github.com/strata-dev/strata/tiers"
)

// TestBackfillFillsTheLiveHour: a user points remote write at Strata at T0
// and then backfills the history from the server they leave. Raw's oldest
// sample is T0, so the head takes the history from T0's hour, and refuses
// what lies behind each series' live samples; the pipeline had written the
// minute partition of T0's hour from the live samples alone. The history of
// that hour before T0 must reach raw (through blocks beside the head) and
// the hour's partition, which keeps the series raw does not hold (the
// diagnosis engine's baselines). Samples raw already holds stay refused:
// the same scrape again, or another value for a timestamp it holds (the
// live one is kept, where the head's refusal used to end the backfill). A
// series with no live samples has the samples the head refuses as too old
// for a new series written the same way, and so has a hole of ten minutes
// in a series' live samples; another scraper's samples among a slow
// series' live ones stay refused, at slice edges too. Run and RunSliced
// alike, and a resume of an import cancelled while it held gap samples.
//
// Two clocks: now 50 minutes into its hour (T0 30 minutes into the hour
// before), and now 20 minutes into it (T0 10 minutes into the hour before),
// where the head's reach for a new series (half an hour back) ends in T0's
// hour: flappy's samples of that hour are gap samples, then appended ones,
// and the partition written again must hold both.
func TestBackfillFillsTheLiveHour(t *testing.T) {
	for _, c := range []struct{ nowAfter, t0Before int64 }{{50 * minute, 80 * minute}, {20 * minute, 70 * minute}} {
		t.Run(fmt.Sprintf("now=h+%dm", c.nowAfter/minute), func(t *testing.T) {
			testBackfillFillsTheLiveHour(t, c.nowAfter, c.t0Before)
		})
	}
}

func testBackfillFillsTheLiveHour(t *testing.T, nowAfter, t0Before int64) {
	h := timegrid.Floor(histEnd, day) // the hour of now, the day's first
	now := h + nowAfter
	t0 := now - t0Before // in T0's hour, h - 1h
	input := history(now-6*hour, now+1)
	gpu1 := labels.FromStrings(model.MetricNameLabel, "DCGM_FI_DEV_GPU_UTIL", "gpu", "1")
	flappy := labels.FromStrings(model.MetricNameLabel, "flappy")
	conflictEnd := now - 15*minute // gpu 1's live samples end here, with other values
	// pod a's live samples have a hole of 10 minutes in T0's hour (the
	// receiver down, what the sender could not deliver dropped).
	podA := labels.FromStrings(model.MetricNameLabel, "vllm:request_success_total", "pod", "a")
	holeFrom, holeTo := t0+10*minute, t0+20*minute

	// What the live server received and what raw must hold at the end.
	var live, want []Series
	for _, s := range normalized(input) {
		l := Series{Labels: s.Labels}
		w := Series{Labels: s.Labels}
		for _, x := range s.Samples {
			switch {
			case labels.Equal(s.Labels, flappy) || x.T < t0:
				w.Samples = append(w.Samples, x)
			case labels.Equal(s.Labels, gpu1) && x.T <= conflictEnd:
				l.Samples = append(l.Samples, Sample{x.T, x.V + 1000})
				w.Samples = append(w.Samples, Sample{x.T, x.V + 1000})
			default:
				hole := labels.Equal(s.Labels, podA) && x.T >= holeFrom && x.T < holeTo
				if !labels.Equal(s.Labels, gpu1) && !hole {
					l.Samples = append(l.Samples, x)
				}
				w.Samples = append(w.Samples, x)
			}
		}
		if len(l.Samples) > 0 {
			live = append(live, l)
		}
		want = append(want, w)
	}
	// slow is scraped every 2 minutes by the live server's sender and, a
	// minute later, by another one whose history the source holds too: the
	// other's samples among the live ones are no hole's (two minutes is the
	// series' interval) and stay refused, but those the head's out-of-order
	// window takes (10 minutes behind now); before T0 both are history.
	slowIn := Series{Labels: labels.FromStrings(model.MetricNameLabel, "slow")}
	slowLive := Series{Labels: slowIn.Labels}
	slowWant := Series{Labels: slowIn.Labels}
	slowGap := 0
	for ts := now - 6*hour; ts <= now; ts += minute {
		x := Sample{ts, float64(ts / minute % 1000)}
		slowIn.Samples = append(slowIn.Samples, x)
		other := ts%(2*minute) != 0
		if ts >= t0 && !other {
			slowLive.Samples = append(slowLive.Samples, x)
		}
		if ts < t0 || !other || ts >= now-10*minute {
			slowWant.Samples = append(slowWant.Samples, x)
		}
		if ts >= h-hour && ts < t0 {
			slowGap++
		}
	}
	input = append(input, slowIn)
	live = append(live, slowLive)
	want = append(want, slowWant)
	baseline := tiers.SeriesWindows{
		Labels:  labels.FromStrings(model.MetricNameLabel, "strata:baseline_median", "metric", "DCGM_FI_DEV_GPU_UTIL", "gpu", "0"),
		Windows: []tiers.Window{{Start: h - hour, FirstT: h - hour, LastT: h - hour, Count: 1, Sum: 42, Min: 42, Max: 42, First: 42, Last: 42}},
	}

	// run imports input into a store holding live. With stop, a first run
	// ends early and a second run of the same input, in a raw tier opened
	// again as a restarted process opens it, resumes it: "cancel" cancels
	// it at its first commit to the head (the gap samples come first, in
	// time order: some are held then); "before-blocks" and "after-blocks"
	// end it with an error before and after its first gap block is
	// written, both after the partition was written again.
	run := func(t *testing.T, sliced bool, stop string) (env, Result) {
		e := openEnv(t, true)
		e.raw = still(e.raw)
		app := e.raw.AppenderV2(context.Background())
		for _, s := range live {
			for _, x := range s.Samples {
				if _, err := app.Append(0, s.Labels, 0, x.T, x.V, nil, nil, storage.AppendV2Options{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := app.Commit(); err != nil {
			t.Fatal(err)
		}
		// The pipeline's partition of T0's hour: the live samples, and a
		// series only the minute tier holds.
		ws, err := minuteWindows(live, h-hour, testKindOf)
		if err != nil {
			t.Fatal(err)
		}
		if err := e.minute.WritePartition(h-hour, append(ws, baseline)); err != nil {
			t.Fatal(err)
		}
		cfg := testConfig()
		cfg.Now = func() time.Time { return time.UnixMilli(now) }
		imp := func(ctx context.Context, progress func(Progress)) (Result, error) {
			if sliced {
				return RunSliced(ctx, cfg, (&sliceReader{input: input}).read, now-6*hour, now+1, time.Hour, e.targets(), progress)
			}
			return Run(ctx, cfg, input, e.targets(), progress)
		}
		if stop != "" {
			cfg.ProgressFile = filepath.Join(t.TempDir(), "progress.json")
			cfg.InputID = "input"
			cfg.BatchSize = 40
			ctx, cancel := context.WithCancel(context.Background())
			errStop := errors.New("stopped")
			switch stop {
			case "before-blocks":
				writeGapBlockFunc = func(context.Context, []Series, string, int64, int64, int64) (int, int, error) {
					return 0, 0, errStop
				}
			case "after-blocks":
				writeGapBlockFunc = func(ctx context.Context, list []Series, dir string, span, from, to int64) (int, int, error) {
					if _, _, err := writeGapBlock(ctx, list, dir, span, from, to); err != nil {
						return 0, 0, err
					}
					return 0, 0, errStop
				}
			}
			_, err := imp(ctx, func(p Progress) {
				if stop == "cancel" && p.Phase == "raw" && p.Done > 0 {
					cancel()
				}
			})
			cancel()
			writeGapBlockFunc = writeGapBlock
			if want := map[bool]error{true: context.Canceled, false: errStop}[stop == "cancel"]; !errors.Is(err, want) {
				t.Fatalf("the first run: %v, want %v", err, want)
			}
			e.raw = still(reopenRaw(t, e.raw))
		}
		res, err := imp(context.Background(), nil)
		if err != nil {
			t.Fatal(err)
		}
		e.raw = reopenRaw(t, e.raw) // loads the blocks written beside the head
		return e, res
	}
	type variant struct {
		sliced bool
		stop   string
	}
	var variants []variant
	for _, sliced := range []bool{false, true} {
		for _, stop := range []string{"", "cancel", "before-blocks", "after-blocks"} {
			variants = append(variants, variant{sliced, stop})
		}
	}
	for _, c := range variants {
		t.Run(fmt.Sprintf("sliced=%v,stop=%s", c.sliced, c.stop), func(t *testing.T) {
			e, res := run(t, c.sliced, c.stop)
			if got, w := rawDump(t, e.raw), dumpSeries(want); got != w {
				t.Errorf("raw holds:\n%s\nwant:\n%s", firstDiff(got, w), firstDiff(w, got))
			}
			// Gap samples: the 30 minutes of T0's hour before T0 of the
			// four live series, and flappy's from the cutoff to half a
			// block duration before now (the head's reach for a new series).
			perSeries := int((t0 - (h - hour)) / 30_000)
			flappyGap := 0
			for _, s := range want {
				if labels.Equal(s.Labels, flappy) {
					for _, x := range s.Samples {
						if x.T >= h-hour && x.T < now-30*minute {
							flappyGap++
						}
					}
				}
			}
			holeGap := int((holeTo - holeFrom) / 30_000)
			// A resume after the partition was written counts what it did.
			counted := c.stop == "" || c.stop == "cancel"
			if wantGap := 4*perSeries + flappyGap + holeGap + slowGap; counted && (res.RawGapSamples != wantGap || res.PartitionsRewritten != 1) {
				t.Errorf("gap samples %d, partitions rewritten %d; want %d, 1", res.RawGapSamples, res.PartitionsRewritten, wantGap)
			}
			// gpu 1's history from T0 to its last live sample is refused,
			// the last one as another value at a timestamp raw holds.
			if counted && res.RefusedRawSamples < int((conflictEnd-t0)/30_000)+1 {
				t.Errorf("refused %d samples, want at least gpu 1's %d", res.RefusedRawSamples, (conflictEnd-t0)/30_000+1)
			}
			// The head's hour of T0 persisted into a block that overlaps
			// the gap block, and the two merged by the TSDB's compactor,
			// as a running server does: raw holds the same.
			db := e.raw.DB()
			if err := db.CompactHead(tsdb.NewRangeHead(db.Head(), h-hour, h-1)); err != nil {
				t.Fatal(err)
			}
			if err := db.Compact(context.Background()); err != nil {
				t.Fatal(err)
			}
			var merged []tsdb.BlockMeta
			for _, b := range db.Blocks() {
				if m := b.Meta(); m.MaxTime > h-hour && m.MinTime < h {
					merged = append(merged, m)
				}
			}
			if len(merged) != 1 || merged[0].Compaction.FromOutOfOrder() || len(merged[0].Compaction.Sources) < 2 {
				t.Errorf("blocks holding T0's hour after the compaction: %+v, want one merged from the gap block and the head's", merged)
			}
			if got, w := rawDump(t, e.raw), dumpSeries(want); got != w {
				t.Errorf("after the head's compaction, raw holds:\n%s\nwant:\n%s", firstDiff(got, w), firstDiff(w, got))
			}
			ref := reference(t, want, minute, h-hour, h)
			checkPartition(t, "T0's hour", e.minute, h-hour, hour, sortedWindows(append(ref, baseline)))
			// T0's hour is the last of its day, which is complete: its
			// hour partition is built from the minute tier, after the
			// rewrite.
			hours, err := e.hour.Select(context.Background(), h-hour, h-1)
			if err != nil {
				t.Fatal(err)
			}
			wantHours := reference(t, want, hour, h-hour, h)
			for _, w := range wantHours {
				i := slices.IndexFunc(hours, func(g tiers.SeriesWindows) bool { return labels.Equal(g.Labels, w.Labels) })
				if i < 0 || len(hours[i].Windows) != 1 || hours[i].Windows[0].Count != w.Windows[0].Count || !same(hours[i].Windows[0].Sum, w.Windows[0].Sum) {
					t.Errorf("hour tier's window of T0's hour for %s: %+v, want %+v", w.Labels, hours[max(i, 0)].Windows, w.Windows)
				}
			}
			if e.minute.HasPartition(h) {
				t.Errorf("the open hour's partition was written: it is the pipeline's")
			}
		})
	}
}

// sortedWindows sorts series windows by labels, as a partition holds them.
func sortedWindows(ws []tiers.SeriesWindows) []tiers.SeriesWindows {
	for i := range ws {
		for j := i + 1; j < len(ws); j++ {
			if labels.Compare(ws[j].Labels, ws[i].Labels) < 0 {
				ws[i], ws[j] = ws[j], ws[i]
			}
		}
	}
	return ws
}

// dumpSeries formats series' float samples as rawDump does.
func dumpSeries(ss []Series) string {
	var sb strings.Builder
	for _, s := range normalized(ss) {
		sb.WriteString(s.Labels.String() + ":")
		for _, x := range s.Samples {
			fmt.Fprintf(&sb, " %d=%x", x.T, math.Float64bits(x.V))
		}
		sb.WriteString("\n")
	}
	return sb.String()
}

// firstDiff is a's line that first differs from b's, shortened.
func firstDiff(a, b string) string {
	al, bl := strings.Split(a, "\n"), strings.Split(b, "\n")
	for i := range al {
		if i >= len(bl) || al[i] != bl[i] {
			l := al[i]
			for j := 0; j < len(l) && i < len(bl); j++ {
				if j >= len(bl[i]) || l[j] != bl[i][j] {
					return fmt.Sprintf("line %d at %d: ...%s", i, j, l[max(0, j-60):min(len(l), j+120)])
				}
			}
			return fmt.Sprintf("line %d: %.200s", i, l)
		}
	}
	return "(same lines)"
}
