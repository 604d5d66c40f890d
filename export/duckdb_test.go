package export_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	_ "github.com/duckdb/duckdb-go/v2" // database/sql driver "duckdb"
	"github.com/parquet-go/parquet-go"

	"github.com/strata-dev/strata/export"
)

// exportFile runs req and writes it in format f to a file in dir.
func exportFile(t *testing.T, e *export.Exporter, req export.Request, f export.Format, dir string) (string, []export.Column) {
	t.Helper()
	p, err := e.Plan(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "export."+string(f))
	out, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := export.NewWriter(f, out, p.Columns(), req.Location)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Run(context.Background(), w, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return path, p.Columns()
}

func capacityRequest(step string, loc *time.Location) export.Request {
	return export.Request{From: time.UnixMilli(t0), To: time.UnixMilli(t0 + 3*dayMs), Step: step, Location: loc,
		Queries: []string{"util=DCGM_FI_DEV_GPU_UTIL", "tokens=vllm:generation_tokens_total", "ttft=vllm:time_to_first_token_seconds"},
		By:      []string{"modelName", "model_name"}}
}

// TestExportFormatsAgree: the CSV and the JSON lines hold exactly the
// Parquet file's values (floats written with the digits that read back
// bit for bit, nulls as empty fields and null), in a time zone with DST.
func TestExportFormatsAgree(t *testing.T) {
	tt := buildTiers(t, knownWorkload(3), 3, t0+2*dayMs)
	e := tt.exporter()
	loc, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skip("no time zone database:", err)
	}
	dir := t.TempDir()
	req := capacityRequest("1d", loc)
	pq, cols := exportFile(t, e, req, export.FormatParquet, dir)
	csvPath, _ := exportFile(t, e, req, export.FormatCSV, dir)
	jsonPath, _ := exportFile(t, e, req, export.FormatJSON, dir)

	rows := readParquet(t, pq)
	b, err := os.ReadFile(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	jb, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(jb)), "\n")
	if len(rows) == 0 || len(recs) != len(rows)+1 || len(lines) != len(rows) {
		t.Fatalf("parquet %d rows, csv %d records, json %d lines", len(rows), len(recs), len(lines))
	}
	for i, c := range cols {
		if recs[0][i] != c.Name {
			t.Fatalf("csv header %v, want the columns %v", recs[0], cols)
		}
	}
	for r, row := range rows {
		var obj map[string]any
		dec := json.NewDecoder(strings.NewReader(lines[r]))
		dec.UseNumber()
		if err := dec.Decode(&obj); err != nil {
			t.Fatal(err)
		}
		for i, c := range cols {
			pv, cv, jv := row[c.Name], recs[r+1][i], obj[c.Name]
			switch c.Type {
			case export.ColString:
				if pv != cv || jv != cv {
					t.Fatalf("row %d %s: parquet %v, csv %q, json %v", r, c.Name, pv, cv, jv)
				}
			case export.ColTime:
				pt := pv.(time.Time)
				ct, err := time.Parse(time.RFC3339, cv)
				if err != nil || !ct.Equal(pt) || jv != cv {
					t.Fatalf("row %d %s: parquet %v, csv %q, json %v", r, c.Name, pv, cv, jv)
				}
				if _, off := ct.Zone(); c.Name == "step_start" && off != map[bool]int{true: -5 * 3600, false: -4 * 3600}[ct.Month() < 3] {
					t.Fatalf("csv time %s not in America/New_York", cv)
				}
			case export.ColInt:
				if strconv.FormatInt(pv.(int64), 10) != cv || jv.(json.Number).String() != cv {
					t.Fatalf("row %d %s: parquet %v, csv %q, json %v", r, c.Name, pv, cv, jv)
				}
			default:
				if pv == nil {
					if cv != "" || jv != nil {
						t.Fatalf("row %d %s: parquet null, csv %q, json %v", r, c.Name, cv, jv)
					}
					continue
				}
				f, err := strconv.ParseFloat(cv, 64)
				jf, jerr := strconv.ParseFloat(string(jv.(json.Number)), 64)
				if err != nil || jerr != nil || math.Float64bits(f) != math.Float64bits(pv.(float64)) || math.Float64bits(jf) != math.Float64bits(f) {
					t.Fatalf("row %d %s: parquet %v, csv %q, json %v", r, c.Name, pv, cv, jv)
				}
			}
		}
	}
}

// TestExportDuckDB: DuckDB reads an exported Parquet file, and its numbers
// equal what DuckDB computes from the rollup tiers' own files through the
// documented view (docs/format/hour-parquet.md) with the SQL of
// docs/format/export.md ("The same numbers in DuckDB").
func TestExportDuckDB(t *testing.T) {
	tt := buildTiers(t, knownWorkload(3), 3, t0+3*dayMs) // the hour tier serves every day
	dir := t.TempDir()
	req := capacityRequest("1d", time.UTC)
	pq, _ := exportFile(t, tt.exporter(), req, export.FormatParquet, dir)

	db, err := sql.Open("duckdb", "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = db.Close() }()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := db.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	exec(fmt.Sprintf(`CREATE VIEW hour AS
SELECT * REPLACE (
    COALESCE(first, last)                                AS first,
    COALESCE(min, LEAST(COALESCE(first, last), last))    AS min,
    COALESCE(max, GREATEST(COALESCE(first, last), last)) AS max,
    COALESCE(increase, last - COALESCE(first, last))     AS increase,
    COALESCE(sum, "count" * last)                        AS sum
)
FROM read_parquet('%s')`, filepath.Join(tt.hour.Config().Dir, "*.parquet")))
	exec(fmt.Sprintf(`CREATE VIEW export AS SELECT * FROM read_parquet('%s')`, pq))

	// Gauges, by GPU model and day.
	type key struct {
		group string
		day   time.Time
	}
	query := func(q string) map[key][]float64 {
		t.Helper()
		rows, err := db.Query(q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		defer func() { _ = rows.Close() }()
		out := map[key][]float64{}
		cols, _ := rows.Columns()
		for rows.Next() {
			var k key
			vals := make([]sql.NullFloat64, len(cols)-2)
			dest := []any{&k.group, &k.day}
			for i := range vals {
				dest = append(dest, &vals[i])
			}
			if err := rows.Scan(dest...); err != nil {
				t.Fatal(err)
			}
			fs := make([]float64, len(vals))
			for i, v := range vals {
				fs[i] = math.NaN()
				if v.Valid {
					fs[i] = v.Float64
				}
			}
			k.day = k.day.UTC()
			out[k] = fs
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	compare := func(name string, fromExport, fromView map[key][]float64) {
		t.Helper()
		if len(fromExport) == 0 || len(fromExport) != len(fromView) {
			t.Fatalf("%s: %d rows from the export, %d from the view", name, len(fromExport), len(fromView))
		}
		for k, ev := range fromExport {
			vv := fromView[k]
			for i := range ev {
				if !near(ev[i], vv[i]) {
					t.Errorf("%s %v column %d: export %v, view %v", name, k, i, ev[i], vv[i])
				}
			}
		}
	}
	compare("gauges",
		query(`SELECT modelName, step_start, util_avg, util_min, util_max, util_p50, util_p95, util_p99
FROM export WHERE modelName <> '' ORDER BY ALL`),
		query(`SELECT modelName, date_trunc('day', start) AS day,
       sum(sum) / sum("count"), min(min), max(max),
       quantile_cont(sum / "count", 0.5), quantile_cont(sum / "count", 0.95), quantile_cont(sum / "count", 0.99)
FROM hour WHERE metric_name = 'DCGM_FI_DEV_GPU_UTIL'
GROUP BY ALL ORDER BY ALL`))
	// Counters: each hour's increase plus the step from the previous
	// hour's last sample (a drop is a reset: the new value counts).
	compare("counters",
		query(`SELECT model_name, step_start, tokens_increase, tokens_rate FROM export WHERE model_name <> '' ORDER BY ALL`),
		query(`WITH r AS (
  SELECT model_name, start, first, increase,
         lag(last) OVER (PARTITION BY series_id ORDER BY start) AS prev_last
  FROM hour WHERE metric_name = 'vllm:generation_tokens_total')
SELECT model_name, date_trunc('day', start) AS day,
       sum(increase + CASE WHEN prev_last IS NULL THEN 0 WHEN first >= prev_last THEN first - prev_last ELSE first END) AS inc,
       inc / 86400
FROM r GROUP BY ALL ORDER BY ALL`))
	// Histogram counts: the +Inf bucket's increase.
	compare("histogram count",
		query(`SELECT model_name, step_start, ttft_count FROM export WHERE model_name <> '' ORDER BY ALL`),
		query(`WITH r AS (
  SELECT model_name, start, first, increase,
         lag(last) OVER (PARTITION BY series_id ORDER BY start) AS prev_last
  FROM hour WHERE metric_name = 'vllm:time_to_first_token_seconds_bucket' AND le = '+Inf')
SELECT model_name, date_trunc('day', start) AS day,
       sum(increase + CASE WHEN prev_last IS NULL THEN 0 WHEN first >= prev_last THEN first - prev_last ELSE first END)
FROM r GROUP BY ALL ORDER BY ALL`))
	// The file's schema: timestamps are TIMESTAMP WITH TIME ZONE, the
	// statistics DOUBLE, the series counts BIGINT.
	var typ string
	if err := db.QueryRow(`SELECT data_type FROM information_schema.columns WHERE table_name = 'export' AND column_name = 'step_start'`).Scan(&typ); err != nil || !strings.HasPrefix(typ, "TIMESTAMP") {
		t.Fatalf("step_start is %q (%v)", typ, err)
	}
}

// readParquet reads a file's rows as column name -> value: string,
// time.Time (TIMESTAMP columns), int64, float64, or nil for a null.
func readParquet(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatal(err)
	}
	leaves := pf.Schema().Fields()
	r := parquet.NewReader(pf)
	defer func() { _ = r.Close() }()
	var out []map[string]any
	buf := make([]parquet.Row, 256)
	for {
		n, err := r.ReadRows(buf)
		for _, row := range buf[:n] {
			m := map[string]any{}
			for _, v := range row {
				leaf := leaves[v.Column()]
				switch {
				case v.IsNull():
					m[leaf.Name()] = nil
				case leaf.Type().Kind() == parquet.ByteArray:
					m[leaf.Name()] = string(v.ByteArray())
				case leaf.Type().LogicalType() != nil && strings.HasPrefix(leaf.Type().LogicalType().String(), "TIMESTAMP"):
					m[leaf.Name()] = time.UnixMilli(v.Int64())
				case leaf.Type().Kind() == parquet.Int64:
					m[leaf.Name()] = v.Int64()
				default:
					m[leaf.Name()] = v.Double()
				}
			}
			out = append(out, m)
		}
		if err != nil {
			break
		}
	}
	return out
}
