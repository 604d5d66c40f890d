package archive

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/common/model"
	"modernc.org/sqlite" // also the database/sql driver "sqlite" (pure Go)
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/strata-dev/strata/diagnose"
)

// FileName is the archive's database in the data directory.
const FileName = "diagnoses.db"

// Verdicts an operator gives.
const (
	VerdictConfirmed  = "confirmed"
	VerdictRejected   = "rejected"
	VerdictRelabelled = "relabelled"
)

// Errors.
var (
	// ErrNotFound: no archived case has the id.
	ErrNotFound = errors.New("no such diagnosis in the archive")
	// ErrInvalidFeedback: the verdict or cause is not acceptable.
	ErrInvalidFeedback = errors.New("invalid feedback")
	// ErrReadOnly: the archive was opened for reading.
	ErrReadOnly = errors.New("the archive is open read-only")
)

// Config is `diagnose.archive` of Strata's configuration.
type Config struct {
	// Retention: cases whose last update is older are deleted (0 keeps
	// everything). Default 90d.
	Retention model.Duration `yaml:"retention"`
}

// DefaultConfig keeps 90 days of cases.
func DefaultConfig() Config { return Config{Retention: model.Duration(90 * 24 * time.Hour)} }

// Options are what an Archive needs besides its path and configuration.
type Options struct {
	// ReadOnly opens an existing archive beside a running `strata serve`
	// (export, inspection): SQLite's WAL mode lets it read while the server
	// writes.
	ReadOnly bool
	// SetAsideCorrupt: a database SQLite finds damaged ("database disk
	// image is malformed", "file is not a database") is renamed to
	// <name>.corrupt (its WAL to <name>.corrupt-wal) and a new, empty
	// archive opened in its place, rather than failing: strata serve
	// would not start (ingestion and all) for want of its case history.
	// The file is kept for sqlite3's .recover. Not with ReadOnly.
	SetAsideCorrupt bool
	Now             func() time.Time
	Logger          *slog.Logger
	Registerer      prometheus.Registerer
}

// Archive is the case archive: every diagnosis the engine makes, its
// fingerprint and the operators' verdicts, in a SQLite database
// (docs/diagnosis-archive.md), with the fingerprint vectors held in memory
// for the similar-case search. It implements diagnose.Archive. All methods
// are safe for concurrent use; the caller MUST call Close.
type Archive struct {
	db       *sql.DB
	cfg      Config
	ro       bool
	now      func() time.Time
	logger   *slog.Logger
	m        metrics
	lastTrim time.Time

	mu    sync.RWMutex
	cases []indexed      // the search index
	byID  map[string]int // position in cases
}

// indexed is one case in the in-memory search index.
type indexed struct {
	id      string
	vec     []float32
	cause   string // the effective cause: the relabelled one, else the diagnosis'
	verdict string
}

type metrics struct {
	records  prometheus.Counter
	failures *prometheus.CounterVec
	cases    prometheus.Gauge
	feedback *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) metrics {
	f := promauto.With(reg)
	return metrics{
		records:  f.NewCounter(prometheus.CounterOpts{Name: "strata_diagnose_archive_records_total", Help: "Diagnosis updates written to the case archive."}),
		failures: f.NewCounterVec(prometheus.CounterOpts{Name: "strata_diagnose_archive_failures_total", Help: "Case archive operations that failed, by operation."}, []string{"op"}),
		cases:    f.NewGauge(prometheus.GaugeOpts{Name: "strata_diagnose_archive_cases", Help: "Cases held in the case archive."}),
		feedback: f.NewCounterVec(prometheus.CounterOpts{Name: "strata_diagnose_archive_feedback_total", Help: "Operator verdicts recorded, by verdict."}, []string{"verdict"}),
	}
}

const schema = `
CREATE TABLE IF NOT EXISTS cases (
	id            TEXT PRIMARY KEY,
	cause         TEXT NOT NULL,
	state         TEXT NOT NULL,
	start_ms      INTEGER NOT NULL,
	end_ms        INTEGER,
	first_seen_ms INTEGER NOT NULL,
	updated_ms    INTEGER NOT NULL,
	diagnosis     TEXT NOT NULL,
	fingerprint   TEXT NOT NULL,
	vector        BLOB NOT NULL,
	verdict       TEXT NOT NULL DEFAULT '',
	verdict_cause TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS cases_updated ON cases (updated_ms);
CREATE TABLE IF NOT EXISTS verdicts (
	id      TEXT NOT NULL REFERENCES cases (id) ON DELETE CASCADE,
	at_ms   INTEGER NOT NULL,
	verdict TEXT NOT NULL,
	cause   TEXT NOT NULL,
	note    TEXT NOT NULL,
	UNIQUE (id, at_ms, verdict, cause, note)
);
PRAGMA user_version = 1;
`

// Open opens (creating unless read-only) the archive at path.
func Open(path string, cfg Config, o Options) (*Archive, error) {
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Registerer == nil {
		o.Registerer = prometheus.NewRegistry()
	}
	if cfg.Retention < 0 {
		return nil, fmt.Errorf("diagnose archive retention must not be negative, got %s", cfg.Retention)
	}
	m := newMetrics(o.Registerer)
	a, err := openDB(path, cfg, o, m)
	if err == nil || !o.SetAsideCorrupt || o.ReadOnly || !isCorrupt(err) {
		return a, err
	}
	if aerr := setAside(path); aerr != nil {
		return nil, errors.Join(err, fmt.Errorf("set the corrupt case archive aside: %w", aerr))
	}
	o.Logger.Error("the case archive was corrupt: set aside, a new one started", "path", path, "moved_to", path+".corrupt", "err", err)
	return openDB(path, cfg, o, m)
}

// isCorrupt reports whether err is SQLite's word that the database file is
// damaged or not a database.
func isCorrupt(err error) bool {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return false
	}
	switch se.Code() & 0xff { // the primary result code
	case sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB:
		return true
	}
	return false
}

// setAside renames the database at path and its WAL to .corrupt names, and
// removes its shared-memory index (rebuilt from the WAL by whoever opens
// the renamed file).
func setAside(path string) error {
	if err := os.Rename(path, path+".corrupt"); err != nil {
		return err
	}
	if err := os.Rename(path+"-wal", path+".corrupt-wal"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.Remove(path + "-shm"); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func openDB(path string, cfg Config, o Options, m metrics) (*Archive, error) {
	// WAL: readers in other processes while serve writes; synchronous=NORMAL:
	// a commit is in the WAL file (the OS has it) before Record returns, so
	// kill -9 loses nothing committed, and a power loss at worst the last
	// commits, never the database. busy_timeout waits out a checkpoint.
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_pragma=busy_timeout(5000)&_pragma=foreign_keys(ON)"
	if o.ReadOnly {
		dsn = "file:" + path + "?mode=ro&_pragma=busy_timeout(5000)"
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("open case archive %s: %w", path, err)
	}
	db.SetMaxOpenConns(1) // one writer; the index serves the searches
	a := &Archive{db: db, cfg: cfg, ro: o.ReadOnly, now: o.Now, logger: o.Logger.With("component", "archive"), m: m, byID: map[string]int{}}
	if !o.ReadOnly {
		if _, err := db.Exec(schema); err != nil {
			return nil, errors.Join(fmt.Errorf("create case archive %s: %w", path, err), db.Close())
		}
		if _, err := a.ApplyRetention(); err != nil {
			return nil, errors.Join(err, db.Close())
		}
	}
	if err := a.load(); err != nil {
		return nil, errors.Join(fmt.Errorf("read case archive %s: %w", path, err), db.Close())
	}
	return a, nil
}

// Close closes the database.
func (a *Archive) Close() error { return a.db.Close() }

// BackupTo writes a consistent copy of the archive to path, a new file
// (SQLite's VACUUM INTO: one file, its WAL folded in), while the archive
// stays open for writes.
func (a *Archive) BackupTo(path string) error {
	if _, err := a.db.Exec("VACUUM INTO ?", path); err != nil {
		return fmt.Errorf("back up case archive to %s: %w", path, err)
	}
	return nil
}

// load fills the search index from the database.
func (a *Archive) load() error {
	rows, err := a.db.Query(`SELECT id, cause, fingerprint, vector, verdict, verdict_cause FROM cases ORDER BY first_seen_ms, id`)
	if err != nil {
		return err
	}
	defer func() { _ = rows.Close() }()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.cases, a.byID = a.cases[:0], map[string]int{}
	for rows.Next() {
		var id, cause, fpJSON, verdict, vcause string
		var blob []byte
		if err := rows.Scan(&id, &cause, &fpJSON, &blob, &verdict, &vcause); err != nil {
			return err
		}
		vec, err := decodeVector(blob)
		if err != nil {
			var fp diagnose.Fingerprint
			if jerr := json.Unmarshal([]byte(fpJSON), &fp); jerr != nil {
				return fmt.Errorf("case %s: %w", id, errors.Join(err, jerr))
			}
			vec = Vector(fp) // another layout version: recompute
		}
		a.cases = append(a.cases, indexed{id: id, vec: vec, cause: effectiveCause(cause, verdict, vcause), verdict: verdict})
		a.byID[id] = len(a.cases) - 1
	}
	a.m.cases.Set(float64(len(a.cases)))
	return rows.Err()
}

func effectiveCause(cause, verdict, vcause string) string {
	if verdict == VerdictRelabelled && vcause != "" {
		return vcause
	}
	return cause
}

// Record implements diagnose.Archive: it stores the diagnosis (inserting it
// with its fingerprint when new, updating its state, end and JSON after).
// Failures are logged and counted; the engine never waits on them beyond
// the one SQLite commit.
func (a *Archive) Record(d diagnose.Diagnosis, fp diagnose.Fingerprint) {
	if err := a.record(d, fp); err != nil {
		a.m.failures.WithLabelValues("record").Inc()
		a.logger.Error("case archive record failed", "id", d.ID, "err", err)
	}
}

func (a *Archive) record(d diagnose.Diagnosis, fp diagnose.Fingerprint) error {
	if a.ro {
		return ErrReadOnly
	}
	dj, err := json.Marshal(d)
	if err != nil {
		return err
	}
	fj, err := json.Marshal(fp)
	if err != nil {
		return fmt.Errorf("marshal fingerprint of %s: %w", d.ID, err)
	}
	vec := Vector(fp)
	var end *int64
	if d.End != nil {
		e := d.End.UnixMilli()
		end = &e
	}
	seen := d.Updated
	if seen.IsZero() {
		seen = d.Start
	}
	_, err = a.db.Exec(`INSERT INTO cases (id, cause, state, start_ms, end_ms, first_seen_ms, updated_ms, diagnosis, fingerprint, vector)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO UPDATE SET cause = excluded.cause, state = excluded.state, end_ms = excluded.end_ms,
			updated_ms = excluded.updated_ms, diagnosis = excluded.diagnosis`,
		d.ID, d.Cause, string(d.State), d.Start.UnixMilli(), end, seen.UnixMilli(), seen.UnixMilli(), string(dj), string(fj), encodeVector(vec))
	if err != nil {
		return fmt.Errorf("store diagnosis %s: %w", d.ID, err)
	}
	a.m.records.Inc()
	a.mu.Lock()
	if i, ok := a.byID[d.ID]; ok {
		if c := &a.cases[i]; c.verdict != VerdictRelabelled {
			c.cause = d.Cause
		}
	} else {
		a.cases = append(a.cases, indexed{id: d.ID, vec: vec, cause: d.Cause})
		a.byID[d.ID] = len(a.cases) - 1
		a.m.cases.Set(float64(len(a.cases)))
	}
	a.mu.Unlock()
	if now := a.now(); now.Sub(a.lastTrim) >= time.Hour {
		if _, err := a.ApplyRetention(); err != nil {
			return err
		}
	}
	return nil
}

// Similar implements diagnose.Archive: the k archived cases nearest to fp,
// most similar first, with their effective cause and verdict.
func (a *Archive) Similar(fp diagnose.Fingerprint, k int) []diagnose.SimilarCase {
	return a.nearest(Vector(fp), k, "")
}

// Nearest is Similar for an archived case, leaving the case itself out
// (the benchmark's leave-one-out).
func (a *Archive) Nearest(id string, k int) ([]diagnose.SimilarCase, error) {
	a.mu.RLock()
	i, ok := a.byID[id]
	var vec []float32
	if ok {
		vec = a.cases[i].vec
	}
	a.mu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, id)
	}
	return a.nearest(vec, k, id), nil
}

// nearest scans every case: 100,000 cases of VectorLen float32s are about
// 10 MB, read in a few milliseconds (BenchmarkSimilar), so no index
// structure is needed at this size.
func (a *Archive) nearest(vec []float32, k int, skip string) []diagnose.SimilarCase {
	if k <= 0 {
		return nil
	}
	type hit struct {
		i int
		d float64
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	top := make([]hit, 0, k+1)
	for i := range a.cases {
		c := &a.cases[i]
		if c.id == skip {
			continue
		}
		d := sqDist(vec, c.vec)
		if len(top) == k && d >= top[k-1].d {
			continue
		}
		j, _ := slices.BinarySearchFunc(top, d, func(h hit, d float64) int {
			if h.d <= d {
				return -1
			}
			return 1
		})
		top = slices.Insert(top, j, hit{i, d})
		if len(top) > k {
			top = top[:k]
		}
	}
	out := make([]diagnose.SimilarCase, len(top))
	for j, h := range top {
		c := a.cases[h.i]
		out[j] = diagnose.SimilarCase{ID: c.id, Cause: c.cause, Similarity: Similarity(vec, c.vec), Verdict: c.verdict}
	}
	return out
}

// Len is the number of archived cases.
func (a *Archive) Len() int {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return len(a.cases)
}

// ApplyRetention deletes the cases whose last update is older than the
// retention and returns how many went.
func (a *Archive) ApplyRetention() (int, error) {
	now := a.now()
	a.lastTrim = now
	if a.cfg.Retention == 0 || a.ro {
		return 0, nil
	}
	cut := now.Add(-time.Duration(a.cfg.Retention)).UnixMilli()
	res, err := a.db.Exec(`DELETE FROM cases WHERE updated_ms < ?`, cut)
	if err != nil {
		a.m.failures.WithLabelValues("retention").Inc()
		return 0, fmt.Errorf("case archive retention: %w", err)
	}
	n, _ := res.RowsAffected()
	if n > 0 {
		return int(n), a.load()
	}
	return 0, nil
}

// Case is one archived case as the API and the export show it.
type Case struct {
	ID          string               `json:"id"`
	Diagnosis   diagnose.Diagnosis   `json:"diagnosis"`
	Fingerprint diagnose.Fingerprint `json:"fingerprint"`
	// FirstSeen is the minute the engine first reported the diagnosis (its
	// first firing minute).
	FirstSeen time.Time `json:"first_seen"`
	Verdicts  []Verdict `json:"verdicts"`
}

// Verdict is one operator feedback.
type Verdict struct {
	At      time.Time `json:"at"`
	Verdict string    `json:"verdict"`
	Cause   string    `json:"cause,omitempty"`
	Note    string    `json:"note,omitempty"`
}

// Get returns an archived case.
func (a *Archive) Get(ctx context.Context, id string) (Case, error) {
	row := a.db.QueryRowContext(ctx, `SELECT diagnosis, fingerprint, first_seen_ms FROM cases WHERE id = ?`, id)
	var dj, fj string
	var seen int64
	if err := row.Scan(&dj, &fj, &seen); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return Case{}, fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		return Case{}, err
	}
	c := Case{ID: id, FirstSeen: time.UnixMilli(seen).UTC()}
	if err := json.Unmarshal([]byte(dj), &c.Diagnosis); err != nil {
		return Case{}, fmt.Errorf("case %s: %w", id, err)
	}
	if err := json.Unmarshal([]byte(fj), &c.Fingerprint); err != nil {
		return Case{}, fmt.Errorf("case %s: %w", id, err)
	}
	vs, err := a.verdicts(ctx, id)
	c.Verdicts = vs
	return c, err
}

func (a *Archive) verdicts(ctx context.Context, id string) ([]Verdict, error) {
	rows, err := a.db.QueryContext(ctx, `SELECT at_ms, verdict, cause, note FROM verdicts WHERE id = ? ORDER BY at_ms, rowid`, id)
	if err != nil {
		return nil, err
	}
	defer func() { _ = rows.Close() }()
	out := []Verdict{}
	for rows.Next() {
		var v Verdict
		var at int64
		if err := rows.Scan(&at, &v.Verdict, &v.Cause, &v.Note); err != nil {
			return nil, err
		}
		v.At = time.UnixMilli(at).UTC()
		out = append(out, v)
	}
	return out, rows.Err()
}

// Feedback records an operator's verdict on a case: confirmed (the cause is
// right), rejected (it is wrong, or nothing was wrong) or relabelled (the
// cause was another one, given in cause). cause must be one of
// diagnose.Causes when given, and is required for relabelled.
func (a *Archive) Feedback(ctx context.Context, id string, v Verdict) (Case, error) {
	if a.ro {
		return Case{}, ErrReadOnly
	}
	if err := validVerdict(v); err != nil {
		return Case{}, err
	}
	if v.At.IsZero() {
		v.At = a.now()
	}
	if err := a.addVerdicts(ctx, id, []Verdict{v}); err != nil {
		return Case{}, err
	}
	a.m.feedback.WithLabelValues(v.Verdict).Inc()
	return a.Get(ctx, id)
}

func validVerdict(v Verdict) error {
	switch v.Verdict {
	case VerdictConfirmed, VerdictRejected:
	case VerdictRelabelled:
		if v.Cause == "" {
			return fmt.Errorf("%w: verdict relabelled needs the right cause in \"cause\"", ErrInvalidFeedback)
		}
	default:
		return fmt.Errorf("%w: verdict %q: want confirmed, rejected or relabelled", ErrInvalidFeedback, v.Verdict)
	}
	if v.Cause != "" && !slices.Contains(diagnose.Causes, v.Cause) {
		return fmt.Errorf("%w: unknown cause %q (known: %v)", ErrInvalidFeedback, v.Cause, diagnose.Causes)
	}
	if len(v.Note) > 4096 {
		return fmt.Errorf("%w: note longer than 4096 bytes", ErrInvalidFeedback)
	}
	return nil
}

// addVerdicts inserts verdicts (ignoring exact repeats) and makes the
// latest one the case's current verdict, in one transaction.
func (a *Archive) addVerdicts(ctx context.Context, id string, vs []Verdict) (err error) {
	tx, err := a.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, tx.Rollback())
		}
	}()
	var cause string
	if err := tx.QueryRowContext(ctx, `SELECT cause FROM cases WHERE id = ?`, id).Scan(&cause); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%w: %s", ErrNotFound, id)
		}
		return err
	}
	for _, v := range vs {
		if _, err := tx.ExecContext(ctx, `INSERT OR IGNORE INTO verdicts (id, at_ms, verdict, cause, note) VALUES (?, ?, ?, ?, ?)`,
			id, v.At.UnixMilli(), v.Verdict, v.Cause, v.Note); err != nil {
			return err
		}
	}
	var verdict, vcause string
	err = tx.QueryRowContext(ctx, `SELECT verdict, cause FROM verdicts WHERE id = ? ORDER BY at_ms DESC, rowid DESC LIMIT 1`, id).Scan(&verdict, &vcause)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE cases SET verdict = ?, verdict_cause = ? WHERE id = ?`, verdict, vcause, id); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	a.mu.Lock()
	if i, ok := a.byID[id]; ok {
		a.cases[i].verdict = verdict
		a.cases[i].cause = effectiveCause(cause, verdict, vcause)
	}
	a.mu.Unlock()
	return nil
}
