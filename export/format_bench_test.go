package export

import (
	"fmt"
	"io"
	"math"
	"testing"
)

// BenchmarkParquetWriter: the Parquet writer alone, on rows shaped like
// the year export's (two group labels, the step's times and tier, one
// gauge query's nine statistics; 1,000 groups a step), per row.
//
//	go test -run '^$' -bench BenchmarkParquetWriter ./export/
func BenchmarkParquetWriter(b *testing.B) {
	cols := []Column{{Name: "Hostname", Type: ColString}, {Name: "gpu", Type: ColString},
		{Name: "step_start", Type: ColTime}, {Name: "step_end", Type: ColTime}, {Name: "tier", Type: ColString},
		{Name: "u_series", Type: ColInt}}
	for _, s := range []string{"coverage", "avg", "min", "max", "p50", "p95", "p99", "last"} {
		cols = append(cols, Column{Name: "u_" + s, Type: ColFloat})
	}
	const groups = 1000
	hosts := make([]string, groups)
	for g := range hosts {
		hosts[g] = fmt.Sprintf("gpu-node-%03d", g/8)
	}
	gpus := []string{"0", "1", "2", "3", "4", "5", "6", "7"}
	row := make([]Cell, len(cols))
	w, err := newParquetWriter(io.Discard, cols)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	n := 0
	for b.Loop() {
		g, step := n%groups, int64(n/groups)
		v := 50 + 40*math.Sin(float64(n)*0.001)
		row[0], row[1] = Cell{S: hosts[g]}, Cell{S: gpus[g%8]}
		row[2], row[3], row[4], row[5] = Cell{I: step * 3_600_000}, Cell{I: (step + 1) * 3_600_000}, Cell{S: "hour"}, Cell{I: 1}
		row[6] = Cell{F: 1}
		for i := 7; i < len(row); i++ {
			row[i] = Cell{F: v + float64(i)}
		}
		if g%97 == 0 {
			row[9] = null
		}
		if err := w.WriteRow(row); err != nil {
			b.Fatal(err)
		}
		n++
	}
	if err := w.Close(); err != nil {
		b.Fatal(err)
	}
}
