package export

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"time"
	"unsafe"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/compress/zstd"
)

// ColType is a column's type.
type ColType uint8

// The column types.
const (
	ColString ColType = iota // group labels, tier
	ColTime                  // step_start, step_end: ms since the epoch
	ColInt                   // <alias>_series
	ColFloat                 // every statistic; null where there is none
)

// Column is one column of an export: its name, type and unit
// (docs/format/export.md).
type Column struct {
	Name string
	Type ColType
	Unit string
	Help string
}

// Cell is one value of a row: S for strings, I for times (ms) and ints, F
// for floats; Null for a float with no value.
type Cell struct {
	S    string
	I    int64
	F    float64
	Null bool
}

// RowWriter receives an export's rows in order; a row is the caller's and
// valid only during WriteRow (Run reuses it). Close writes what the format
// needs at the end (Parquet's footer) and flushes; it does not close the
// underlying writer.
type RowWriter interface {
	WriteRow(row []Cell) error
	Close() error
}

// Flusher is implemented by writers that can push what they buffered to
// the underlying writer before the end (the API flushes after each step).
type Flusher interface {
	Flush() error
}

// NewWriter returns the RowWriter of format f over out. Times are written
// in loc in CSV and JSON lines (RFC 3339 with the zone's offset), as
// TIMESTAMP(MILLIS, UTC) in Parquet.
func NewWriter(f Format, out io.Writer, cols []Column, loc *time.Location) (RowWriter, error) {
	if loc == nil {
		loc = time.UTC
	}
	switch f {
	case FormatCSV:
		return newCSVWriter(out, cols, loc)
	case FormatJSON:
		return &jsonWriter{w: bufio.NewWriterSize(out, 64<<10), cols: cols, times: timeCache{loc: loc}}, nil
	case FormatParquet:
		return newParquetWriter(out, cols)
	}
	return nil, fmt.Errorf("%w: unknown format %q", ErrBadRequest, f)
}

// formatFloat writes v with the fewest digits that read back as v exactly,
// so that a CSV or JSON value equals the Parquet one bit for bit.
func formatFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

func parseFloat(s string) (float64, error) { return strconv.ParseFloat(s, 64) }

func formatTime(ms int64, loc *time.Location) string {
	return time.UnixMilli(ms).In(loc).Format(time.RFC3339)
}

// timeCache formats the few times a step's rows repeat once each.
type timeCache struct {
	loc  *time.Location
	ms   [2]int64
	text [2]string
	n    int
}

func (c *timeCache) format(ms int64) string {
	for i := range c.n {
		if c.ms[i] == ms {
			return c.text[i]
		}
	}
	i := c.n % 2
	c.ms[i], c.text[i] = ms, formatTime(ms, c.loc)
	if c.n < 2 {
		c.n++
	} else {
		c.n = 2
	}
	return c.text[i]
}

type csvWriter struct {
	bw    *bufio.Writer
	w     *csv.Writer
	cols  []Column
	times timeCache
	rec   []string
}

func newCSVWriter(out io.Writer, cols []Column, loc *time.Location) (*csvWriter, error) {
	bw := bufio.NewWriterSize(out, 64<<10)
	c := &csvWriter{bw: bw, w: csv.NewWriter(bw), cols: cols, times: timeCache{loc: loc}, rec: make([]string, len(cols))}
	for i, col := range cols {
		c.rec[i] = col.Name
	}
	return c, c.w.Write(c.rec)
}

func (c *csvWriter) WriteRow(row []Cell) error {
	for i, col := range c.cols {
		c.rec[i] = cellText(col, row[i], &c.times)
	}
	return c.w.Write(c.rec)
}

func cellText(col Column, v Cell, times *timeCache) string {
	switch {
	case col.Type == ColString:
		return v.S
	case col.Type == ColTime:
		return times.format(v.I)
	case col.Type == ColInt:
		return strconv.FormatInt(v.I, 10)
	case v.Null:
		return ""
	}
	return formatFloat(v.F)
}

func (c *csvWriter) Flush() error {
	c.w.Flush()
	if err := c.w.Error(); err != nil {
		return err
	}
	return c.bw.Flush()
}

func (c *csvWriter) Close() error { return c.Flush() }

type jsonWriter struct {
	w     *bufio.Writer
	cols  []Column
	times timeCache
	buf   []byte
}

func (j *jsonWriter) WriteRow(row []Cell) error {
	b := j.buf[:0]
	b = append(b, '{')
	for i, col := range j.cols {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, col.Name)
		b = append(b, ':')
		v := row[i]
		switch {
		case col.Type == ColString:
			enc, err := json.Marshal(v.S)
			if err != nil {
				return err
			}
			b = append(b, enc...)
		case col.Type == ColTime:
			b = append(b, '"')
			b = append(b, j.times.format(v.I)...)
			b = append(b, '"')
		case col.Type == ColInt:
			b = strconv.AppendInt(b, v.I, 10)
		case v.Null:
			b = append(b, "null"...)
		default:
			b = strconv.AppendFloat(b, v.F, 'g', -1, 64)
		}
	}
	b = append(b, '}', '\n')
	j.buf = b
	_, err := j.w.Write(b)
	return err
}

func (j *jsonWriter) Flush() error { return j.w.Flush() }
func (j *jsonWriter) Close() error { return j.w.Flush() }

// parquetWriter writes rows with a schema built from the columns, in
// their order: a struct type made at run time names the fields (parquet-go
// orders a schema's columns as a struct's fields, and a map-based group
// alphabetically). Rows are gathered column by column and handed to
// parquet-go's column writers a batch at a time, which skips splitting
// rows into columns again.
type parquetWriter struct {
	w    *parquet.GenericWriter[any]
	cols []Column
	vals [][]parquet.Value // per column, the batch's values
	n    int               // rows in the current row group
}

const parquetBatch = 1024

const parquetRowsPerGroup = 64 << 10

func newParquetWriter(out io.Writer, cols []Column) (*parquetWriter, error) {
	fields := make([]reflect.StructField, len(cols))
	for i, c := range cols {
		f := reflect.StructField{Name: fmt.Sprintf("F%d", i)}
		switch c.Type {
		case ColString:
			f.Type, f.Tag = reflect.TypeFor[string](), reflect.StructTag(fmt.Sprintf(`parquet:%q`, c.Name+",dict"))
		case ColTime:
			f.Type, f.Tag = reflect.TypeFor[int64](), reflect.StructTag(fmt.Sprintf(`parquet:%q`, c.Name+",timestamp(millisecond)"))
		case ColInt:
			f.Type, f.Tag = reflect.TypeFor[int64](), reflect.StructTag(fmt.Sprintf(`parquet:%q`, c.Name))
		default:
			f.Type, f.Tag = reflect.TypeFor[float64](), reflect.StructTag(fmt.Sprintf(`parquet:%q`, c.Name+",optional"))
		}
		fields[i] = f
	}
	schema := parquet.SchemaOf(reflect.New(reflect.StructOf(fields)).Interface())
	if got := len(schema.Columns()); got != len(cols) {
		return nil, fmt.Errorf("export parquet schema: %d columns, want %d", got, len(cols))
	}
	w := parquet.NewGenericWriter[any](out, schema, parquet.Compression(&zstd.Codec{Level: zstd.SpeedDefault}),
		parquet.PageBufferSize(256<<10), parquet.CreatedBy("strata export", "", ""))
	vals := make([][]parquet.Value, len(cols))
	for i := range vals {
		vals[i] = make([]parquet.Value, 0, parquetBatch)
	}
	return &parquetWriter{w: w, cols: cols, vals: vals}, nil
}

// stringBytes is s's bytes, not copied: the batch's values point into the
// strings of the rows written (group labels, tiers, which repeat on every
// step), which parquet-go only reads, copying them into its dictionary or
// page before writeBuffered returns; the pointer keeps each string alive
// until then.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

func (p *parquetWriter) WriteRow(row []Cell) error {
	// A required column's buffer reads only a value's bytes; an optional
	// column's reads the definition level too (1: a value, 0: null), so
	// only the floats' values carry levels.
	for i, col := range p.cols {
		v := &row[i]
		var pv parquet.Value
		switch {
		case col.Type == ColString:
			pv = parquet.ByteArrayValue(stringBytes(v.S))
		case col.Type == ColTime, col.Type == ColInt:
			pv = parquet.Int64Value(v.I)
		case v.Null:
			pv = parquet.NullValue()
		default:
			pv = parquet.DoubleValue(v.F).Level(0, 1, i)
		}
		p.vals[i] = append(p.vals[i], pv)
	}
	if len(p.vals[0]) >= parquetBatch {
		return p.writeBuffered()
	}
	return nil
}

func (p *parquetWriter) writeBuffered() error {
	rows := len(p.vals[0])
	if rows == 0 {
		return nil
	}
	for i, cw := range p.w.ColumnWriters() {
		n, err := cw.WriteRowValues(p.vals[i])
		if err != nil {
			return fmt.Errorf("write parquet column %s: %w", p.cols[i].Name, err)
		}
		if n != rows {
			return fmt.Errorf("write parquet column %s: %d rows of %d", p.cols[i].Name, n, rows)
		}
		p.vals[i] = p.vals[i][:0]
	}
	p.n += rows
	if p.n >= parquetRowsPerGroup {
		p.n = 0
		return p.w.Flush()
	}
	return nil
}

// Flush ends the current row group, so that its bytes reach the writer.
func (p *parquetWriter) Flush() error {
	if err := p.writeBuffered(); err != nil {
		return err
	}
	p.n = 0
	return p.w.Flush()
}

func (p *parquetWriter) Close() error {
	if err := p.writeBuffered(); err != nil {
		return err
	}
	return p.w.Close()
}
