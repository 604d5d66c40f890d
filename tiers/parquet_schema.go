package tiers

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
	"unsafe"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
)

// parquetSchemaVersion is written into every rollup file's key/value metadata
// (key "strata.schema_version"); readers refuse files with a newer version.
// The layout is documented in docs/format/hour-parquet.md and minute.md.
//
// Version 2 leaves first, min, max, increase and sum null where a rule over the
// row's other columns gives them back exactly (parquet_derive.go); version 1
// stored every aggregate. Readers read both.
const parquetSchemaVersion = "2"

// parquetRow is one row of a minute or hour rollup file: one series' window.
//
// The metric name and the labels DCGM and vLLM series usually carry have their
// own dictionary-encoded columns, because analysts filter on them: in a
// DuckDB test on 9 million rows, a filter on a label took 23-35 ms as a wide
// column and 2.3-2.8 s as a map key, for files of about the same size. The
// full canonical label set is kept in `labels`
// as a JSON object so nothing is lost and Strata rebuilds series from it.
// Absent labels are null. Timestamps are int64 milliseconds annotated as
// TIMESTAMP(ms, UTC).
//
// The aggregates a rule can derive are optional (nil: null, see
// nullAggregates); `last` never is. Encodings were chosen by measurement at
// zstd SpeedBestCompression (docs/format/minute.md): byte-stream-split for
// sum, PLAIN for the others, which zstd's better match finding compresses
// further than byte-stream-split on this data.
type parquetRow struct {
	MetricName string   `parquet:"metric_name,dict"`
	Job        string   `parquet:"job,optional,dict"`
	Instance   string   `parquet:"instance,optional,dict"`
	Namespace  string   `parquet:"namespace,optional,dict"`
	Pod        string   `parquet:"pod,optional,dict"`
	Container  string   `parquet:"container,optional,dict"`
	ModelName  string   `parquet:"model_name,optional,dict"`
	Engine     string   `parquet:"engine,optional,dict"`
	GPU        string   `parquet:"gpu,optional,dict"`
	UUID       string   `parquet:"UUID,optional,dict"`
	GPUModel   string   `parquet:"modelName,optional,dict"`
	Hostname   string   `parquet:"Hostname,optional,dict"`
	Le         string   `parquet:"le,optional,dict"`
	Labels     string   `parquet:"labels,dict"`
	SeriesID   int64    `parquet:"series_id"`
	Start      int64    `parquet:"start,timestamp(millisecond),delta"`
	FirstTS    int64    `parquet:"first_ts,timestamp(millisecond),delta"`
	LastTS     int64    `parquet:"last_ts,timestamp(millisecond),delta"`
	Count      int64    `parquet:"count,delta"`
	Sum        *float64 `parquet:"sum,optional,split"`
	Min        *float64 `parquet:"min,optional,plain"`
	Max        *float64 `parquet:"max,optional,plain"`
	First      *float64 `parquet:"first,optional,plain"`
	Last       float64  `parquet:"last,plain"`
	Increase   *float64 `parquet:"increase,optional,plain"`
	Resets     int32    `parquet:"resets,delta"`
	Stale      bool     `parquet:"stale"`
}

// seriesRowTemplate fills the label columns of a row for one series; the window
// fields are set per row by fillWindow.
func seriesRowTemplate(lbls labels.Labels) (parquetRow, error) {
	js, err := json.Marshal(lbls)
	if err != nil {
		return parquetRow{}, fmt.Errorf("encode labels %s: %w", lbls, err)
	}
	return parquetRow{
		MetricName: lbls.Get(model.MetricNameLabel),
		Job:        lbls.Get("job"),
		Instance:   lbls.Get("instance"),
		Namespace:  lbls.Get("namespace"),
		Pod:        lbls.Get("pod"),
		Container:  lbls.Get("container"),
		ModelName:  lbls.Get("model_name"),
		Engine:     lbls.Get("engine"),
		GPU:        lbls.Get("gpu"),
		UUID:       lbls.Get("UUID"),
		GPUModel:   lbls.Get("modelName"),
		Hostname:   lbls.Get("Hostname"),
		Le:         lbls.Get("le"),
		Labels:     string(js),
		SeriesID:   SeriesID(lbls),
	}, nil
}

// fillWindow sets the window fields of a row. The optional aggregates point
// into agg (5 values, owned by the row from then on), or are nil where the
// reader's rule gives the value back.
func (r *parquetRow) fillWindow(w Window, agg []float64) {
	r.Start, r.FirstTS, r.LastTS = w.Start, w.FirstT, w.LastT
	r.Count = int64(w.Count)
	agg[0], agg[1], agg[2], agg[3], agg[4] = w.Sum, w.Min, w.Max, w.First, w.Increase
	nulls := nullAggregates(w)
	opt := func(bit nullMask, v *float64) *float64 {
		if nulls&bit != 0 {
			return nil
		}
		return v
	}
	r.Sum, r.Min, r.Max = opt(nullSum, &agg[0]), opt(nullMin, &agg[1]), opt(nullMax, &agg[2])
	r.First, r.Increase = opt(nullFirst, &agg[3]), opt(nullIncrease, &agg[4])
	r.Last = w.Last
	r.Resets = int32(min(w.Resets, 1<<31-1)) //nolint:gosec // clamped above
	r.Stale = w.Stale
}

// decodeLabels parses the `labels` column (a JSON object of name to value).
func decodeLabels(b []byte) (labels.Labels, error) {
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return labels.EmptyLabels(), fmt.Errorf("decode labels column %q: %w", b, err)
	}
	return labels.FromMap(m), nil
}

// labelsDecoder decodes the `labels` column as decodeLabels does, without
// its map and two strings a label (garbage after every series): text that
// is valid UTF-8 and whose names and values hold no escape and no control
// character is read straight into one label set; that is all the text
// encoding/json writes for label sets without quotes, backslashes, control
// or HTML characters (which it escapes). Other text goes to decodeLabels.
// One per file reader.
type labelsDecoder struct {
	sb labels.ScratchBuilder
	// scratch is peek's label set, overwritten by the next peek.
	scratch labels.Labels
	// peeked is whether the last peek's label set is scratch.
	peeked bool
}

// decode is peek then keep: a label set of its own.
func (d *labelsDecoder) decode(text []byte) (labels.Labels, error) {
	lbls, err := d.peek(text)
	if err != nil {
		return lbls, err
	}
	return d.keep(lbls), nil
}

// peek decodes text as decodeLabels does, but the label set it returns may
// be scratch space that the next peek overwrites: a reader that keeps it
// calls keep. A file reader decodes every series' labels to match them,
// and keeps only the matching ones that the raw head does not hold
// (labelshare): a copy of each, made and dropped, was 170 bytes a series
// and select.
func (d *labelsDecoder) peek(text []byte) (labels.Labels, error) {
	if lbls, ok := d.plain(text); ok {
		d.peeked = true
		return lbls, nil
	}
	d.peeked = false
	return decodeLabels(text)
}

// keep returns the label set the last peek returned, lbls, as one the
// caller may keep.
func (d *labelsDecoder) keep(lbls labels.Labels) labels.Labels {
	if !d.peeked {
		return lbls // decodeLabels' own
	}
	return d.sb.Labels() // the scratch builder still holds the labels
}

// plain decodes text when it is a JSON object of plain strings (see
// labelsDecoder) with no name twice, into d.scratch; false otherwise.
func (d *labelsDecoder) plain(text []byte) (labels.Labels, bool) {
	if !utf8.Valid(text) {
		return labels.EmptyLabels(), false // encoding/json reads invalid bytes as U+FFFD
	}
	d.sb.Reset()
	i := skipJSONSpace(text, 0)
	if i == len(text) || text[i] != '{' {
		return labels.EmptyLabels(), false
	}
	i = skipJSONSpace(text, i+1)
	if i < len(text) && text[i] == '}' {
		return labels.EmptyLabels(), skipJSONSpace(text, i+1) == len(text)
	}
	for {
		name, j, ok := plainJSONString(text, i)
		if !ok {
			return labels.EmptyLabels(), false
		}
		if i = skipJSONSpace(text, j); i == len(text) || text[i] != ':' {
			return labels.EmptyLabels(), false
		}
		value, j, ok := plainJSONString(text, skipJSONSpace(text, i+1))
		if !ok {
			return labels.EmptyLabels(), false
		}
		// The strings point into text, which outlives Labels' copy below.
		d.sb.Add(unsafe.String(unsafe.SliceData(name), len(name)), unsafe.String(unsafe.SliceData(value), len(value)))
		if i = skipJSONSpace(text, j); i == len(text) {
			return labels.EmptyLabels(), false
		}
		if text[i] == '}' {
			if skipJSONSpace(text, i+1) != len(text) {
				return labels.EmptyLabels(), false
			}
			break
		}
		if text[i] != ',' {
			return labels.EmptyLabels(), false
		}
		i = skipJSONSpace(text, i+1)
	}
	d.sb.Sort()
	d.sb.Overwrite(&d.scratch)
	lbls := d.scratch
	if _, dup := lbls.HasDuplicateLabelNames(); dup {
		return labels.EmptyLabels(), false // encoding/json keeps the last value
	}
	return lbls, true
}

// plainJSONString returns the content of the JSON string starting at
// text[i] and the index after it; false when there is none or it holds an
// escape or a control character.
func plainJSONString(text []byte, i int) ([]byte, int, bool) {
	if i >= len(text) || text[i] != '"' {
		return nil, 0, false
	}
	for j := i + 1; j < len(text); j++ {
		switch c := text[j]; {
		case c == '"':
			return text[i+1 : j], j + 1, true
		case c == '\\' || c < 0x20:
			return nil, 0, false
		}
	}
	return nil, 0, false
}

func skipJSONSpace(text []byte, i int) int {
	for i < len(text) && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r') {
		i++
	}
	return i
}

// sortedRows turns series into rows in file order: metric name, series_id,
// labels (only to break hash ties), start.
func sortedRows(series []SeriesWindows) ([]parquetRow, error) {
	type item struct {
		tmpl parquetRow
		ws   []Window
	}
	items := make([]item, 0, len(series))
	n := 0
	for _, s := range series {
		if len(s.Windows) == 0 {
			continue
		}
		if s.Labels.Get(model.MetricNameLabel) == "" {
			return nil, fmt.Errorf("series %s has no metric name", s.Labels)
		}
		tmpl, err := seriesRowTemplate(s.Labels)
		if err != nil {
			return nil, err
		}
		for i := 1; i < len(s.Windows); i++ {
			if s.Windows[i].Start <= s.Windows[i-1].Start {
				return nil, fmt.Errorf("series %s: windows not in ascending start order at %d", s.Labels, s.Windows[i].Start)
			}
		}
		items = append(items, item{tmpl: tmpl, ws: s.Windows})
		n += len(s.Windows)
	}
	slices.SortFunc(items, func(a, b item) int {
		if c := strings.Compare(a.tmpl.MetricName, b.tmpl.MetricName); c != 0 {
			return c
		}
		if a.tmpl.SeriesID != b.tmpl.SeriesID {
			if a.tmpl.SeriesID < b.tmpl.SeriesID {
				return -1
			}
			return 1
		}
		return strings.Compare(a.tmpl.Labels, b.tmpl.Labels)
	})
	for i := 1; i < len(items); i++ {
		if items[i].tmpl.Labels == items[i-1].tmpl.Labels {
			return nil, fmt.Errorf("series %s given twice", items[i].tmpl.Labels)
		}
	}
	rows := make([]parquetRow, 0, n)
	agg := make([]float64, 5*n)
	for _, it := range items {
		for _, w := range it.ws {
			r := it.tmpl
			i := len(rows)
			r.fillWindow(w, agg[5*i:5*i+5:5*i+5])
			rows = append(rows, r)
		}
	}
	return rows, nil
}

// The rollup tiers' codecs, one per zstd level (RollupConfig.Zstd), shared
// by every file written at that level, because each keeps its encoders,
// whose tables are costly to set up: a new codec per file made writing a
// small file 3-5x slower.
//
// The hour tier writes at SpeedBestCompression, which its size target at 15 s
// sampling needs (1/50.7 of raw, 1/48.7 at the better level). The minute
// tier writes at SpeedBetterCompression: 6.7-6.9 % larger files on the size
// test's data (0.893x raw at 15 s against a target of 1x, 1/12.3 at 1 s
// against 1/8), for a third to two thirds of the write time, and an encoder
// of 6.8 MB instead of 38 MB, which an hour's write at 500,000 series held
// in the minutes Strata's memory peaks (docs/format/minute.md, "zstd
// level"; docs/bench.md, stop 43).
var (
	betterCodec = newRollupCodec(zstd.SpeedBetterCompression)
	bestCodec   = newRollupCodec(zstd.SpeedBestCompression)
)

// codecFor is the codec of level.
func codecFor(level ZstdLevel) *storedZstd {
	if level == ZstdBest {
		return bestCodec
	}
	return betterCodec
}

// rollupWindow is the rollup codec's zstd window: see newKeptZstd.
const rollupWindow = 1 << 20

// parquetWriterOptions are the writer settings shared by both tiers.
func parquetWriterOptions(codec *storedZstd, rowsPerGroup int64, res string) []parquet.WriterOption {
	return []parquet.WriterOption{
		parquet.Compression(codec),
		parquet.MaxRowsPerRowGroup(rowsPerGroup),
		// One data page per column chunk of a 32k-row group (the default 256
		// KiB buffer cut each double column into two): 1.7 % smaller minute
		// files, for 1 MiB of buffer per column while a file is written.
		parquet.PageBufferSize(1 << 20),
		parquet.DictionaryMaxBytes(4 << 20), // falls back to PLAIN past this (safe since v0.31.0)
		parquet.SortingWriterConfig(parquet.SortingColumns(
			parquet.Ascending("metric_name"), parquet.Ascending("series_id"), parquet.Ascending("start"))),
		parquet.BloomFilters(parquet.SplitBlockFilter(10, "metric_name")),
		parquet.SkipPageBounds("labels"),
		parquet.KeyValueMetadata("strata.schema_version", parquetSchemaVersion),
		parquet.KeyValueMetadata("strata.resolution", res),
		parquet.CreatedBy("strata", parquetSchemaVersion, ""),
	}
}
