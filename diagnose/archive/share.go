package archive

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Export writes every case as one JSON line (Case), oldest first, so a
// fleet can share its cases (`strata diagnose archive export`).
func (a *Archive) Export(ctx context.Context, w io.Writer) (int, error) {
	rows, err := a.db.QueryContext(ctx, `SELECT id FROM cases ORDER BY first_seen_ms, id`)
	if err != nil {
		return 0, fmt.Errorf("export case archive: %w", err)
	}
	var ids []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return 0, errors.Join(err, rows.Close())
		}
		ids = append(ids, id)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return 0, fmt.Errorf("export case archive: %w", err)
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, id := range ids {
		c, err := a.Get(ctx, id)
		if errors.Is(err, ErrNotFound) {
			continue // deleted by retention meanwhile
		}
		if err != nil {
			return 0, err
		}
		if err := enc.Encode(c); err != nil {
			return 0, fmt.Errorf("export case %s: %w", id, err)
		}
	}
	return len(ids), bw.Flush()
}

// ImportResult counts what an import added. Skipped cases were held
// already; Expired ones are older than the retention (they would be
// deleted at once).
type ImportResult struct {
	Cases, Verdicts, Skipped, Expired int
}

// maxImportLine bounds one JSON line of an import (a case with its
// evidence and verdicts is a few kilobytes).
const maxImportLine = 4 << 20

// Import reads cases written by Export. A case whose id is archived
// already is not replaced, and a verdict identical to one held (same time,
// verdict, cause and note) is not added again: importing twice adds
// nothing the second time.
func (a *Archive) Import(ctx context.Context, r io.Reader) (ImportResult, error) {
	var res ImportResult
	if a.ro {
		return res, ErrReadOnly
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxImportLine)
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var c Case
		if err := json.Unmarshal(sc.Bytes(), &c); err != nil {
			return res, fmt.Errorf("import line %d: %w", line, err)
		}
		if c.ID == "" || c.ID != c.Diagnosis.ID {
			return res, fmt.Errorf("import line %d: id %q does not match its diagnosis (%q)", line, c.ID, c.Diagnosis.ID)
		}
		for _, v := range c.Verdicts {
			if err := validVerdict(v); err != nil {
				return res, fmt.Errorf("import line %d: %w", line, err)
			}
		}
		if a.expired(c) {
			res.Expired++
			continue
		}
		added, err := a.insertCase(ctx, c)
		if err != nil {
			return res, fmt.Errorf("import line %d: %w", line, err)
		}
		if added {
			res.Cases++
		} else {
			res.Skipped++
		}
		if len(c.Verdicts) > 0 {
			before, err := a.countVerdicts(ctx, c.ID)
			if err != nil {
				return res, err
			}
			if err := a.addVerdicts(ctx, c.ID, c.Verdicts); err != nil {
				return res, fmt.Errorf("import line %d: %w", line, err)
			}
			after, err := a.countVerdicts(ctx, c.ID)
			if err != nil {
				return res, err
			}
			res.Verdicts += after - before
		}
	}
	if err := sc.Err(); err != nil {
		return res, fmt.Errorf("import line %d: %w", line+1, err)
	}
	return res, nil
}

func (a *Archive) insertCase(ctx context.Context, c Case) (bool, error) {
	d := c.Diagnosis
	dj, err := json.Marshal(d)
	if err != nil {
		return false, err
	}
	fj, err := json.Marshal(c.Fingerprint)
	if err != nil {
		return false, err
	}
	vec := Vector(c.Fingerprint)
	var end *int64
	if d.End != nil {
		e := d.End.UnixMilli()
		end = &e
	}
	seen := c.FirstSeen
	if seen.IsZero() {
		seen = d.Start
	}
	upd := d.Updated
	if upd.IsZero() {
		upd = seen
	}
	res, err := a.db.ExecContext(ctx, `INSERT OR IGNORE INTO cases (id, cause, state, start_ms, end_ms, first_seen_ms, updated_ms, diagnosis, fingerprint, vector)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		d.ID, d.Cause, string(d.State), d.Start.UnixMilli(), end, seen.UnixMilli(), upd.UnixMilli(), string(dj), string(fj), encodeVector(vec))
	if err != nil {
		return false, fmt.Errorf("store case %s: %w", d.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	a.mu.Lock()
	a.cases = append(a.cases, indexed{id: d.ID, vec: vec, cause: d.Cause})
	a.byID[d.ID] = len(a.cases) - 1
	a.m.cases.Set(float64(len(a.cases)))
	a.mu.Unlock()
	return true, nil
}

func (a *Archive) countVerdicts(ctx context.Context, id string) (int, error) {
	var n int
	err := a.db.QueryRowContext(ctx, `SELECT count(*) FROM verdicts WHERE id = ?`, id).Scan(&n)
	return n, err
}

// expired reports whether the retention would delete c.
func (a *Archive) expired(c Case) bool {
	if a.cfg.Retention == 0 {
		return false
	}
	upd := c.Diagnosis.Updated
	if upd.IsZero() {
		upd = c.FirstSeen
	}
	return upd.Before(a.now().Add(-time.Duration(a.cfg.Retention)))
}
