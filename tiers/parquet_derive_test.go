package tiers

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
)

var deriveT0 = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC).UnixMilli()

// specialFloats are the values a lossless format gets wrong first.
var specialFloats = []float64{
	0, math.Copysign(0, -1), 1, -1, 0.1, -2.5, 1e300, -1e300, 1 << 53, 1<<53 + 2,
	math.MaxFloat64, -math.MaxFloat64, math.SmallestNonzeroFloat64, -math.SmallestNonzeroFloat64,
	math.Inf(1), math.Inf(-1), math.NaN(), math.Float64frombits(value.StaleNaN),
	math.Float64frombits(0x7ff8000000000001), math.Float64frombits(0xfff8000000000000),
}

func randFloat(rng *rand.Rand) float64 {
	switch rng.IntN(5) {
	case 0:
		return specialFloats[rng.IntN(len(specialFloats))]
	case 1:
		return math.Float64frombits(rng.Uint64()) // any bits, NaN payloads included
	case 2:
		return float64(rng.IntN(200) - 50)
	case 3:
		return math.Round(rng.NormFloat64()*40000) / 1000
	default:
		return rng.ExpFloat64() * 1e6
	}
}

// randWindow returns a window whose fields are unrelated, or related the way
// real windows are (so that the version-2 rules apply), or related but with
// a twist that must keep the value stored (a sign of zero, a NaN, an overflow).
func randWindow(rng *rand.Rand, start int64) Window {
	w := Window{Start: start, FirstT: start + rng.Int64N(30000), Count: uint32(1 + rng.IntN(4)), Resets: uint32(rng.IntN(3)), Stale: rng.IntN(4) == 0}
	w.LastT = w.FirstT + rng.Int64N(30000)
	if rng.IntN(50) == 0 {
		w.Count = math.MaxUint32
	}
	switch rng.IntN(6) {
	case 0: // unrelated
		w.Sum, w.Min, w.Max, w.First, w.Last, w.Increase = randFloat(rng), randFloat(rng), randFloat(rng), randFloat(rng), randFloat(rng), randFloat(rng)
	case 1: // a counter window without reset
		w.First = randFloat(rng)
		w.Last = w.First + math.Abs(randFloat(rng))
		w.Min, w.Max, w.Increase, w.Resets = w.First, w.Last, w.Last-w.First, 0
		w.Sum = randFloat(rng)
	case 2: // one sample, or a constant value
		w.First = randFloat(rng)
		w.Last, w.Min, w.Max, w.Increase, w.Sum = w.First, w.First, w.First, 0, float64(w.Count)*w.First
	case 3: // extremes at the ends, in either order
		w.First, w.Last = randFloat(rng), randFloat(rng)
		w.Min, w.Max, w.Increase, w.Sum = math.Min(w.First, w.Last), math.Max(w.First, w.Last), w.Last-w.First, randFloat(rng)
	case 4: // zeros of both signs
		z := []float64{0, math.Copysign(0, -1)}
		w.First, w.Last, w.Min, w.Max, w.Increase, w.Sum = z[rng.IntN(2)], z[rng.IntN(2)], z[rng.IntN(2)], z[rng.IntN(2)], z[rng.IntN(2)], z[rng.IntN(2)]
	default: // derivable but for one field
		w.First = randFloat(rng)
		w.Last = w.First + float64(rng.IntN(5))
		w.Min, w.Max, w.Increase, w.Sum = math.Min(w.First, w.Last), math.Max(w.First, w.Last), w.Last-w.First, float64(w.Count)*w.Last
		v := randFloat(rng)
		switch rng.IntN(5) {
		case 0:
			w.Min = v
		case 1:
			w.Max = v
		case 2:
			w.Increase = v
		case 3:
			w.Sum = v
		default:
			w.First = v
		}
	}
	return w
}

func bitsEqual(a, b Window) bool {
	f := math.Float64bits
	return a.Start == b.Start && a.FirstT == b.FirstT && a.LastT == b.LastT && a.Count == b.Count &&
		f(a.Sum) == f(b.Sum) && f(a.Min) == f(b.Min) && f(a.Max) == f(b.Max) && f(a.First) == f(b.First) &&
		f(a.Last) == f(b.Last) && f(a.Increase) == f(b.Increase) && a.Resets == b.Resets && a.Stale == b.Stale
}

func fmtWindow(w Window) string {
	f := math.Float64bits
	return fmt.Sprintf("{start %d first_ts %d last_ts %d count %d sum %#x min %#x max %#x first %#x last %#x increase %#x resets %d stale %v}",
		w.Start, w.FirstT, w.LastT, w.Count, f(w.Sum), f(w.Min), f(w.Max), f(w.First), f(w.Last), f(w.Increase), w.Resets, w.Stale)
}

func openDeriveTestRollup(t *testing.T, dir string) *Rollup {
	t.Helper()
	cfg := DefaultMinuteConfig(dir)
	cfg.RowsPerRowGroup = 500 // several row groups per file
	return openRollupForTest(t, cfg, nil)
}

// randomPartitions returns, per hourly partition, series with random windows.
func randomPartitions(rng *rand.Rand, parts, nSeries int) map[int64][]SeriesWindows {
	out := map[int64][]SeriesWindows{}
	for p := range parts {
		start := deriveT0 + int64(p)*3600_000
		for s := range nSeries {
			lbls := labels.FromStrings("__name__", fmt.Sprintf("metric_%d", s%3), "instance", fmt.Sprintf("host-%d", s), "job", "derive")
			var ws []Window
			for m := range 60 {
				if rng.IntN(4) != 0 {
					ws = append(ws, randWindow(rng, start+int64(m)*60_000))
				}
			}
			out[start] = append(out[start], SeriesWindows{Labels: lbls, Windows: ws})
		}
	}
	return out
}

// TestRollupRoundTripBitExact is the lossless property of schema version 2:
// random and edge-case windows (NaN with any payload, ±Inf, -0, overflowing
// differences, windows where a rule gives the value and windows where it is
// off by one field) written with WritePartition come back from Select with
// the same bits in every field, and so does every subset of columns the
// stitched querier decodes (columnsFor), whose rules need other columns.
func TestRollupRoundTripBitExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // deterministic test data
	r := openDeriveTestRollup(t, t.TempDir())
	parts := randomPartitions(rng, 4, 40)
	// The second hour's windows have no null but some min and max (whose
	// first is not null), the third's none: their row groups come between
	// the random hours' in a reader's batch, so that a select asking for
	// an aggregate alone meets row groups where its rule's inputs fill
	// nulls and row groups where they fill none.
	for k, start := range []int64{deriveT0 + 3600_000, deriveT0 + 2*3600_000} {
		for i := range parts[start] {
			for j, w := range parts[start][i].Windows {
				last := 2 + float64(j)
				w = Window{Start: w.Start, FirstT: w.Start + 1, LastT: w.Start + 59_000, Count: 5,
					Sum: 7.5 + float64(j), Min: 0.5, Max: last + 1 + float64(i), First: 1, Last: last, Increase: 1.25, Resets: 1}
				if k == 0 && i%2 == 0 {
					w.Max = last // null: the rule's max(first, last)
				}
				if k == 0 && i%3 == 1 {
					w.Min = 1 // null: the rule's min(first, last)
				}
				if nm := nullAggregates(w); nm&^(nullMin|nullMax) != 0 || k == 1 && nm != 0 {
					t.Fatalf("window %+v has nulls %b", w, nm)
				}
				parts[start][i].Windows[j] = w
			}
		}
	}
	want := map[string]map[int64]Window{}
	var seen nullMask
	nulls := map[nullMask]int{}
	for start, series := range parts {
		if err := r.WritePartition(start, series); err != nil {
			t.Fatal(err)
		}
		for _, s := range series {
			m := want[s.Labels.String()]
			if m == nil {
				m = map[int64]Window{}
				want[s.Labels.String()] = m
			}
			for _, w := range s.Windows {
				m[w.Start] = w
				nm := nullAggregates(w)
				seen |= nm
				for _, b := range []nullMask{nullFirst, nullMin, nullMax, nullIncrease, nullSum} {
					if nm&b != 0 {
						nulls[b]++
					}
				}
			}
		}
	}
	if seen != nullFirst|nullMin|nullMax|nullIncrease|nullSum {
		t.Fatalf("not every rule is exercised: %b", seen)
	}
	t.Logf("null cells written per rule (first, min, max, increase, sum): %d %d %d %d %d", nulls[nullFirst], nulls[nullMin], nulls[nullMax], nulls[nullIncrease], nulls[nullSum])

	check := func(t *testing.T, got []SeriesWindows, cmp func(a, b Window) bool) {
		t.Helper()
		n := 0
		for _, sw := range got {
			for _, w := range sw.Windows {
				exp, ok := want[sw.Labels.String()][w.Start]
				if !ok {
					t.Fatalf("%s: unexpected window at %d", sw.Labels, w.Start)
				}
				if !cmp(w, exp) {
					t.Fatalf("%s:\n got  %s\n want %s", sw.Labels, fmtWindow(w), fmtWindow(exp))
				}
				n++
			}
		}
		total := 0
		for _, m := range want {
			total += len(m)
		}
		if n != total {
			t.Fatalf("read %d windows, wrote %d", n, total)
		}
	}
	t.Run("Select", func(t *testing.T) {
		got, err := r.Select(context.Background(), deriveT0, deriveT0+4*3600_000)
		if err != nil {
			t.Fatal(err)
		}
		check(t, got, bitsEqual)
	})
	// Each mode's columns, then each aggregate alone: its rule's inputs
	// are decoded without being asked for, and not returned.
	var needs []colSet
	for mode := modeLast; mode <= modeDelta; mode++ {
		needs = append(needs, columnsFor(mode))
	}
	needs = append(needs, colSum, colMin, colMax, colFirst, colIncrease, colCount, colMax|colSum)
	for _, need := range needs {
		t.Run(fmt.Sprintf("columns %b", need), func(t *testing.T) {
			sel, err := r.selectColumns(context.Background(), deriveT0, deriveT0+4*3600_000, nil, selectOptions{need: need})
			if err != nil {
				t.Fatal(err)
			}
			got := make([]SeriesWindows, len(sel))
			for i, s := range sel {
				got[i] = SeriesWindows{Labels: s.lbls, Windows: s.ws.appendTo(nil)}
			}
			f := math.Float64bits
			check(t, got, func(a, b Window) bool {
				for c := colSet(1); c <= colStale; c <<= 1 {
					if need&c == 0 {
						continue
					}
					ok := true
					switch c {
					case colSum:
						ok = f(a.Sum) == f(b.Sum)
					case colMin:
						ok = f(a.Min) == f(b.Min)
					case colMax:
						ok = f(a.Max) == f(b.Max)
					case colFirst:
						ok = f(a.First) == f(b.First)
					case colLast:
						ok = f(a.Last) == f(b.Last)
					case colIncrease:
						ok = f(a.Increase) == f(b.Increase)
					case colCount:
						ok = a.Count == b.Count
					case colResets:
						ok = a.Resets == b.Resets
					case colFirstT:
						ok = a.FirstT == b.FirstT
					case colLastT:
						ok = a.LastT == b.LastT
					case colStale:
						ok = a.Stale == b.Stale
					default:
						t.Fatalf("unknown column %b", c)
					}
					if !ok {
						return false
					}
				}
				return a.Start == b.Start
			})
		})
	}
}

func TestNullAggregates(t *testing.T) {
	negZero := math.Copysign(0, -1)
	counter := Window{Count: 4, First: 10, Last: 25, Min: 10, Max: 25, Increase: 15, Sum: 70}
	for _, tc := range []struct {
		name string
		w    Window
		want nullMask
	}{
		{"counter without reset", counter, nullMin | nullMax | nullIncrease},
		{"one sample", Window{Count: 1, First: 3.5, Last: 3.5, Min: 3.5, Max: 3.5, Sum: 3.5}, nullFirst | nullMin | nullMax | nullIncrease | nullSum},
		// A Kahan sum of 0.1 three times is the correctly rounded 0.3; 3*0.1 is 0.30000000000000004.
		{"constant", Window{Count: 3, First: 0.1, Last: 0.1, Min: 0.1, Max: 0.1, Sum: 0.3}, nullFirst | nullMin | nullMax | nullIncrease},
		{"falling", Window{Count: 2, First: 5, Last: 2, Min: 2, Max: 5, Increase: 2, Resets: 1, Sum: 7}, nullMin | nullMax},
		{"extreme inside", Window{Count: 3, First: 5, Last: 6, Min: 1, Max: 6, Increase: 7, Sum: 12}, nullMax},
		{"last NaN", Window{Count: 1, First: math.NaN(), Last: math.NaN(), Min: math.NaN(), Max: math.NaN(), Sum: math.NaN()}, 0},
		{"first NaN", Window{Count: 2, First: math.NaN(), Last: 1, Min: 1, Max: 1, Sum: math.NaN()}, 0},
		{"min NaN", Window{Count: 2, First: 1, Last: 1, Min: math.NaN(), Max: 1, Sum: 2}, nullFirst | nullMax | nullIncrease | nullSum},
		{"+Inf last", Window{Count: 2, First: 1, Last: math.Inf(1), Min: 1, Max: math.Inf(1), Increase: math.Inf(1), Sum: math.Inf(1)}, 0},
		{"overflowing difference", Window{Count: 2, First: -math.MaxFloat64, Last: math.MaxFloat64, Min: -math.MaxFloat64, Max: math.MaxFloat64, Increase: math.Inf(1), Sum: 0}, nullMin | nullMax},
		{"overflowing sum", Window{Count: 3, First: math.MaxFloat64, Last: math.MaxFloat64, Min: math.MaxFloat64, Max: math.MaxFloat64, Sum: math.Inf(1)}, nullFirst | nullMin | nullMax | nullIncrease},
		{"+0 then -0", Window{Count: 2, First: 0, Last: negZero, Min: negZero, Max: 0, Increase: negZero, Sum: 0}, nullIncrease}, // -0 - +0 = -0
		{"-0 twice", Window{Count: 2, First: negZero, Last: negZero, Min: negZero, Max: negZero, Increase: 0, Sum: negZero}, nullFirst | nullMin | nullMax | nullIncrease | nullSum},
		{"-0 increase", Window{Count: 1, First: 1, Last: 1, Min: 1, Max: 1, Increase: negZero, Sum: 1}, nullFirst | nullMin | nullMax | nullSum},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := nullAggregates(tc.w); got != tc.want {
				t.Fatalf("null mask %05b, want %05b", got, tc.want)
			}
		})
	}
}

func TestDerivationInputs(t *testing.T) {
	if got := derivationInputs(colAll); got != colAll {
		t.Fatalf("all columns: %b, want %b", got, colAll)
	}
	got := derivationInputs(colMin | colSum | colLastT)
	if want := colMin | colSum | colLastT | colFirst | colLast | colCount; got != want {
		t.Errorf("min, sum, last_ts: %b, want %b", got, want)
	}
	if got := derivationInputs(colLast); got != colLast {
		t.Errorf("last needs nothing else: %b", got)
	}
}

func TestDeriveWindowColumnsErrors(t *testing.T) {
	if err := deriveWindowColumns(windowColumns{Last: []float64{1}, LastNull: []bool{true}}); err == nil {
		t.Error("a null last was accepted")
	}
	if err := deriveWindowColumns(windowColumns{Last: []float64{1, 2}, Min: []float64{0, 0}, MinNull: []bool{true, false}}); err == nil {
		t.Error("min derived without first")
	}
	if err := deriveWindowColumns(windowColumns{Last: []float64{1, 2}, Sum: []float64{0, 0}, SumNull: []bool{true, true}}); err == nil {
		t.Error("sum derived without count")
	}
	c := windowColumns{Count: []int64{2}, Last: []float64{3}, First: []float64{0}, FirstNull: []bool{true}, Sum: []float64{0}, SumNull: []bool{true},
		Min: []float64{0}, MinNull: []bool{true}, Max: []float64{0}, MaxNull: []bool{true}, Inc: []float64{9}, IncNull: []bool{true}}
	if err := deriveWindowColumns(c); err != nil {
		t.Fatal(err)
	}
	if c.First[0] != 3 || c.Min[0] != 3 || c.Max[0] != 3 || c.Inc[0] != 0 || c.Sum[0] != 6 {
		t.Errorf("derived %+v", c)
	}
}

// parquetRowV1 is the row of schema version 1, as released: every aggregate
// stored, byte-stream-split. Users have files in this layout.
type parquetRowV1 struct {
	MetricName string  `parquet:"metric_name,dict"`
	Job        string  `parquet:"job,optional,dict"`
	Instance   string  `parquet:"instance,optional,dict"`
	Namespace  string  `parquet:"namespace,optional,dict"`
	Pod        string  `parquet:"pod,optional,dict"`
	Container  string  `parquet:"container,optional,dict"`
	ModelName  string  `parquet:"model_name,optional,dict"`
	Engine     string  `parquet:"engine,optional,dict"`
	GPU        string  `parquet:"gpu,optional,dict"`
	UUID       string  `parquet:"UUID,optional,dict"`
	GPUModel   string  `parquet:"modelName,optional,dict"`
	Hostname   string  `parquet:"Hostname,optional,dict"`
	Le         string  `parquet:"le,optional,dict"`
	Labels     string  `parquet:"labels,dict"`
	SeriesID   int64   `parquet:"series_id"`
	Start      int64   `parquet:"start,timestamp(millisecond),delta"`
	FirstTS    int64   `parquet:"first_ts,timestamp(millisecond),delta"`
	LastTS     int64   `parquet:"last_ts,timestamp(millisecond),delta"`
	Count      int64   `parquet:"count,delta"`
	Sum        float64 `parquet:"sum,split"`
	Min        float64 `parquet:"min,split"`
	Max        float64 `parquet:"max,split"`
	First      float64 `parquet:"first,split"`
	Last       float64 `parquet:"last,split"`
	Increase   float64 `parquet:"increase,split"`
	Resets     int32   `parquet:"resets,delta"`
	Stale      bool    `parquet:"stale"`
}

// writeV1Partition writes series as a version-1 file (or with the given
// schema_version metadata; "" writes none) into dir under the partition name.
func writeV1Partition(t *testing.T, dir string, start int64, series []SeriesWindows, version string) {
	t.Helper()
	rows, err := sortedRows(series)
	if err != nil {
		t.Fatal(err)
	}
	v1 := make([]parquetRowV1, len(rows))
	i := 0
	byKey := map[string]map[int64]Window{}
	for _, s := range series {
		js, err := seriesRowTemplate(s.Labels)
		if err != nil {
			t.Fatal(err)
		}
		m := map[int64]Window{}
		for _, w := range s.Windows {
			m[w.Start] = w
		}
		byKey[js.Labels] = m
	}
	for _, r := range rows {
		w := byKey[r.Labels][r.Start]
		v1[i] = parquetRowV1{MetricName: r.MetricName, Job: r.Job, Instance: r.Instance, Namespace: r.Namespace, Pod: r.Pod, Container: r.Container,
			ModelName: r.ModelName, Engine: r.Engine, GPU: r.GPU, UUID: r.UUID, GPUModel: r.GPUModel, Hostname: r.Hostname, Le: r.Le,
			Labels: r.Labels, SeriesID: r.SeriesID, Start: r.Start, FirstTS: r.FirstTS, LastTS: r.LastTS, Count: r.Count,
			Sum: w.Sum, Min: w.Min, Max: w.Max, First: w.First, Last: w.Last, Increase: w.Increase, Resets: r.Resets, Stale: r.Stale}
		i++
	}
	opts := []parquet.WriterOption{
		parquet.Compression(&zstd.Codec{Level: zstd.SpeedBetterCompression}),
		parquet.MaxRowsPerRowGroup(500),
		parquet.SortingWriterConfig(parquet.SortingColumns(parquet.Ascending("metric_name"), parquet.Ascending("series_id"), parquet.Ascending("start"))),
		parquet.BloomFilters(parquet.SplitBlockFilter(10, "metric_name")),
		parquet.SkipPageBounds("labels"),
		parquet.KeyValueMetadata("strata.resolution", "1m0s"),
	}
	if version != "" {
		opts = append(opts, parquet.KeyValueMetadata("strata.schema_version", version))
	}
	f, err := os.Create(filepath.Join(dir, partitionName(start))) //nolint:gosec // test temp dir
	if err != nil {
		t.Fatal(err)
	}
	w := parquet.NewGenericWriter[parquetRowV1](f, opts...)
	if _, err := w.Write(v1); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestRollupReadsVersion1 checks that files written before schema version 2
// (every aggregate stored, no nulls) read exactly as before, alone and next to
// version-2 files of the same tier, and that files without the version key
// read as version 1.
func TestRollupReadsVersion1(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4)) //nolint:gosec // deterministic test data
	dir := t.TempDir()
	parts := randomPartitions(rng, 3, 20)
	writeV1Partition(t, dir, deriveT0, parts[deriveT0], "1")
	writeV1Partition(t, dir, deriveT0+3600_000, parts[deriveT0+3600_000], "")
	r := openDeriveTestRollup(t, dir)
	if err := r.WritePartition(deriveT0+2*3600_000, parts[deriveT0+2*3600_000]); err != nil {
		t.Fatal(err)
	}
	got, err := r.Select(context.Background(), deriveT0, deriveT0+3*3600_000)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]Window{}
	for p := range 3 {
		for _, s := range parts[deriveT0+int64(p)*3600_000] {
			want[s.Labels.String()] = append(want[s.Labels.String()], s.Windows...)
		}
	}
	n := 0
	for _, sw := range got {
		ws := want[sw.Labels.String()]
		if len(ws) != len(sw.Windows) {
			t.Fatalf("%s: %d windows, want %d", sw.Labels, len(sw.Windows), len(ws))
		}
		for i := range ws {
			if !bitsEqual(sw.Windows[i], ws[i]) {
				t.Fatalf("%s:\n got  %s\n want %s", sw.Labels, fmtWindow(sw.Windows[i]), fmtWindow(ws[i]))
			}
			n++
		}
	}
	if n == 0 || len(got) != len(want) {
		t.Fatalf("read %d series, %d windows; want %d series", len(got), n, len(want))
	}
}

// TestRollupRefusesUnknownSchemaVersion: a file of a newer schema version (or
// a version that is not a number) is an error, not a silent misread.
func TestRollupRefusesUnknownSchemaVersion(t *testing.T) {
	for _, v := range []string{"3", "10", "2.1", "x", "0"} {
		t.Run(v, func(t *testing.T) {
			dir := t.TempDir()
			rng := rand.New(rand.NewPCG(5, 6)) //nolint:gosec // deterministic test data
			writeV1Partition(t, dir, deriveT0, randomPartitions(rng, 1, 2)[deriveT0], v)
			r := openDeriveTestRollup(t, dir)
			_, err := r.Select(context.Background(), deriveT0, deriveT0+3600_000)
			if err == nil || !strings.Contains(err.Error(), "schema version") {
				t.Fatalf("version %s: err %v", v, err)
			}
		})
	}
}

// TestReadNullableDoubles decodes optional and required DOUBLE columns in every
// encoding a file may hold: the page-buffer path (PLAIN, byte-stream-split)
// and the value-by-value fallback (dictionary), with nulls, NaN payloads and
// -0, over several pages and row groups.
func TestReadNullableDoubles(t *testing.T) {
	type row struct {
		Plain *float64 `parquet:"plain,optional,plain"`
		Split *float64 `parquet:"split,optional,split"`
		Dict  *float64 `parquet:"dict,optional,dict"`
		Req   float64  `parquet:"req,split"`
	}
	rng := rand.New(rand.NewPCG(7, 8)) //nolint:gosec // deterministic test data
	const n = 5000
	vals := make([]float64, n)
	null := make([]bool, n)
	rows := make([]row, n)
	for i := range rows {
		vals[i] = randFloat(rng)
		if i%97 == 0 {
			vals[i] = float64(i % 5) // repeats, for the dictionary
		}
		null[i] = rng.IntN(3) == 0
		v := &vals[i]
		if null[i] {
			v = nil
		}
		rows[i] = row{Plain: v, Split: v, Dict: v, Req: vals[i]}
	}
	var buf strings.Builder
	w := parquet.NewGenericWriter[row](&buf, parquet.MaxRowsPerRowGroup(1500), parquet.PageBufferSize(4096))
	if _, err := w.Write(rows); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.String()
	pf, err := parquet.OpenFile(strings.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	for c, name := range []string{"plain", "split", "dict", "req"} {
		var got []float64
		var gotNull []bool
		var vbuf []parquet.Value
		for _, rg := range pf.RowGroups() {
			if got, gotNull, err = readNullableDoubles(rg.ColumnChunks()[c], name, int(rg.NumRows()), got, gotNull, &vbuf); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		if len(got) != n || len(gotNull) != n {
			t.Fatalf("%s: %d values, %d null flags, want %d", name, len(got), len(gotNull), n)
		}
		for i := range n {
			wantNull := null[i] && name != "req"
			if gotNull[i] != wantNull || (!wantNull && math.Float64bits(got[i]) != math.Float64bits(vals[i])) {
				t.Fatalf("%s row %d: got %#x null %v, want %#x null %v", name, i, math.Float64bits(got[i]), gotNull[i], math.Float64bits(vals[i]), wantNull)
			}
		}
	}
}
