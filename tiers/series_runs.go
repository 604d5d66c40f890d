package tiers

import (
	"bufio"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/parquet-go/parquet-go"
)

// seriesRunsKey is the key/value metadata entry of a partition file that
// lists its series in row order: for each run of rows of one series, its
// series_id and row count (docs/format/minute.md, "Series runs").
//
// A query must map every row to its series before it can keep or drop it.
// Decoding the series_id column for that cost a fifth of a 30-day minute
// query's CPU: 8 bytes per row, zstd-compressed runs of one value, and a
// comparison per row. The directory holds the same information in ~13 bytes
// per series and file, parsed once per file and kept with the open file.
const seriesRunsKey = "strata.series_runs"

// seriesRun is a run of rows of one series.
type seriesRun struct {
	id   int64
	rows int64
}

// appendSeriesRun appends a run to a seriesRunsKey value before its
// base64 (standard, padded): the series_id as 8 bytes little-endian and the
// row count as a uvarint.
func appendSeriesRun(b []byte, id int64, rows int) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(id)) //nolint:gosec // the id's bits
	return binary.AppendUvarint(b, uint64(rows))        //nolint:gosec // a count
}

// runsReader reads a seriesRunsKey value run by run, as written (not split
// at row groups), a few KiB at a time instead of decoding it whole.
type runsReader struct{ r *bufio.Reader }

func newRunsReader(v string) runsReader {
	return runsReader{bufio.NewReaderSize(base64.NewDecoder(base64.StdEncoding, strings.NewReader(v)), 4<<10)}
}

// next returns the next run, or false at the value's end. A value that is
// not base64 or is cut short, or a run parseRun refuses, is an error.
func (rr runsReader) next() (seriesRun, bool, error) {
	b, err := rr.r.Peek(8 + binary.MaxVarintLen64) // short at the end
	if len(b) == 0 && err == io.EOF {
		return seriesRun{}, false, nil
	}
	r, k, perr := parseRun(b)
	if perr != nil {
		if err != nil && err != io.EOF {
			return seriesRun{}, false, fmt.Errorf("%s metadata: %w", seriesRunsKey, err)
		}
		return seriesRun{}, false, perr
	}
	_, _ = rr.r.Discard(k) // buffered: cannot fail
	return r, true, nil
}

// parseRun parses the run b starts with (appendSeriesRun's) and returns
// its length in b, or an error for a run cut short or of no rows.
func parseRun(b []byte) (seriesRun, int, error) {
	if len(b) < 9 {
		return seriesRun{}, 0, fmt.Errorf("%s metadata: truncated run", seriesRunsKey)
	}
	n, k := binary.Uvarint(b[8:])
	if k <= 0 || n == 0 || n > math.MaxInt64 {
		return seriesRun{}, 0, fmt.Errorf("%s metadata: bad row count", seriesRunsKey)
	}
	return seriesRun{id: int64(binary.LittleEndian.Uint64(b)), rows: int64(n)}, 8 + k, nil //nolint:gosec // the id's bits; n checked
}

// rowGroupRuns parses a file's seriesRunsKey value and splits the runs at
// its row group boundaries. It returns nil when the file has none (files
// written before it existed, or by the hour tier) and an error when the
// directory does not add up to the file's rows.
//
// The runs of every row group are slices of one array, allocated once (a
// run takes 9 bytes or more of the directory). Growing a list of all runs
// and then a slice per row group allocated six times as much: 16 MB to
// parse 100,000 series' runs against 2.5 MB, garbage made when the
// diagnosis engine opens each hour's partition.
func rowGroupRuns(pf *parquet.File) ([][]seriesRun, error) {
	v, ok := pf.Lookup(seriesRunsKey)
	if !ok {
		return nil, nil
	}
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("%s metadata: %w", seriesRunsKey, err)
	}
	rgs := pf.RowGroups()
	all := make([]seriesRun, 0, len(b)/9+len(rgs)) // a run split at a boundary takes two
	out := make([][]seriesRun, 0, len(rgs))
	// left is the rows of the current row group, rgs[len(out)], not in a
	// run yet; its runs are all[start:].
	var left int64
	start := 0
	if len(rgs) > 0 {
		left = rgs[0].NumRows()
	}
	closeFull := func() {
		for left == 0 && len(out) < len(rgs) {
			out = append(out, all[start:len(all):len(all)])
			start = len(all)
			if len(out) < len(rgs) {
				left = rgs[len(out)].NumRows()
			}
		}
	}
	closeFull() // leading empty row groups
	for len(b) > 0 {
		r, k, err := parseRun(b)
		if err != nil {
			return nil, err
		}
		if r.rows > pf.NumRows() {
			return nil, fmt.Errorf("%s metadata: bad row count", seriesRunsKey)
		}
		b = b[k:]
		id, rows := r.id, r.rows
		for rows > 0 {
			if len(out) == len(rgs) {
				return nil, errors.New(seriesRunsKey + " metadata lists more rows than the file holds")
			}
			take := min(rows, left) // the run goes on in the next row group when left is short
			all = append(all, seriesRun{id: id, rows: take})
			rows -= take
			left -= take
			closeFull()
		}
	}
	if len(out) < len(rgs) {
		return nil, errors.New(seriesRunsKey + " metadata lists fewer rows than the file holds")
	}
	return out, nil
}

// indexByRuns is indexByID for a row group whose series runs are known:
// one map lookup per run instead of decoding and comparing a series_id per
// row. When some id is not known yet it expands the runs into fr.ids, for
// the labels-based mapping.
func (fr *fileReader) indexByRuns(runs []seriesRun, dst []rowRun) (out []rowRun, matched, known bool) {
	row := int64(0)
	for _, r := range runs {
		si, ok := fr.byID[r.id]
		if !ok || si == idAmbiguous {
			fr.ids = fr.ids[:0]
			for _, r := range runs {
				for range r.rows {
					fr.ids = append(fr.ids, r.id)
				}
			}
			return dst[:0], false, false
		}
		matched = matched || si >= 0
		dst = append(dst, rowRun{si: si, lo: int32(row), hi: int32(row + r.rows)}) //nolint:gosec // a row group's rows fit
		row += r.rows
	}
	return dst, matched, true
}
