package archive

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"

	"github.com/strata-dev/strata/diagnose"
)

var t0 = time.Date(2026, 1, 19, 3, 0, 0, 0, time.UTC)

// fpFor is a fingerprint whose signals depend on the cause, with noise.
func fpFor(cause string, rng *rand.Rand) diagnose.Fingerprint {
	base := map[string]float64{
		"strata:gpu_sm_active:ratio": 0.8, "strata:gpu_sm_clock:ratio": 1, "strata:gpu_power_watts": 500,
		"strata:kv_cache_usage:ratio": 0.4, "strata:requests_waiting": 2, "strata:ttft_seconds:p99": 0.5,
		"strata:prefix_cache_hit:ratio": 0.37, "strata:spec_decode_acceptance:ratio": 0.62,
	}
	switch cause {
	case "kv_cache_eviction_storm":
		base["strata:kv_cache_usage:ratio"], base["strata:preemptions:rate"], base["strata:requests_waiting"] = 0.99, 3, 400
	case "power_cap":
		base["strata:gpu_sm_clock:ratio"], base["strata:gpu_power_watts"] = 0.6, 300
	case "prefix_cache_collapse":
		base["strata:prefix_cache_hit:ratio"] = 0.02
	}
	fp := diagnose.Fingerprint{Signals: map[string]float64{}}
	for k, v := range base {
		fp.Signals[k] = v * (1 + 0.02*rng.NormFloat64())
	}
	return fp
}

func diag(id, cause string, start time.Time) diagnose.Diagnosis {
	return diagnose.Diagnosis{
		ID: id, Cause: cause, State: diagnose.StateFiring, Confidence: 0.8, Start: start, Updated: start.Add(2 * time.Minute),
		Entities:   diagnose.Entities{Namespace: "inference", Pod: "vllm-" + id},
		Candidates: []diagnose.Candidate{{Cause: cause, Score: 0.8}},
		Evidence:   []diagnose.Evidence{{Metric: "strata:kv_cache_usage:ratio", Query: "x"}},
	}
}

func open(t testing.TB, path string, cfg Config, now func() time.Time) *Archive {
	t.Helper()
	a, err := Open(path, cfg, Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Close() })
	return a
}

// TestRecordSimilarFeedback: cases are stored and updated, the nearest
// cases share the cause, and verdicts change what Similar reports.
func TestRecordSimilarFeedback(t *testing.T) {
	a := open(t, filepath.Join(t.TempDir(), FileName), DefaultConfig(), func() time.Time { return t0 })
	rng := rand.New(rand.NewPCG(1, 2))
	causes := []string{"kv_cache_eviction_storm", "power_cap", "prefix_cache_collapse"}
	for i := range 30 {
		c := causes[i%3]
		d := diag(fmt.Sprintf("d-%02d", i), c, t0.Add(time.Duration(i)*time.Hour))
		a.Record(d, fpFor(c, rng))
		end := d.Start.Add(20 * time.Minute)
		d.State, d.End = diagnose.StateResolved, &end
		a.Record(d, fpFor(c, rng)) // an update keeps the first fingerprint
	}
	if a.Len() != 30 {
		t.Fatalf("%d cases, want 30", a.Len())
	}
	for _, c := range causes {
		got := a.Similar(fpFor(c, rng), 3)
		if len(got) != 3 {
			t.Fatalf("%d similar cases, want 3", len(got))
		}
		for _, s := range got {
			if s.Cause != c || s.Similarity <= 0.9 || s.Similarity > 1 {
				t.Errorf("similar to %s: %+v", c, s)
			}
		}
	}
	near, err := a.Nearest("d-00", 1)
	if err != nil || len(near) != 1 || near[0].ID == "d-00" || near[0].Cause != causes[0] {
		t.Fatalf("nearest to d-00: %+v %v", near, err)
	}
	ctx := context.Background()
	c, err := a.Feedback(ctx, near[0].ID, Verdict{Verdict: VerdictRelabelled, Cause: "request_queue_backlog", Note: "it was the backlog"})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Verdicts) != 1 || c.Diagnosis.State != diagnose.StateResolved || !c.FirstSeen.Equal(c.Diagnosis.Start.Add(2*time.Minute)) {
		t.Fatalf("case after feedback: %+v", c)
	}
	near2, _ := a.Nearest("d-00", 1)
	if near2[0].Cause != "request_queue_backlog" || near2[0].Verdict != VerdictRelabelled {
		t.Fatalf("relabelled case still reported as %+v", near2[0])
	}
	for _, bad := range []Verdict{{Verdict: "maybe"}, {Verdict: VerdictRelabelled}, {Verdict: VerdictConfirmed, Cause: "gremlins"}} {
		if _, err := a.Feedback(ctx, "d-01", bad); !errors.Is(err, ErrInvalidFeedback) {
			t.Errorf("feedback %+v: %v, want ErrInvalidFeedback", bad, err)
		}
	}
	if _, err := a.Feedback(ctx, "d-nope", Verdict{Verdict: VerdictConfirmed}); !errors.Is(err, ErrNotFound) {
		t.Errorf("feedback on an unknown id: %v", err)
	}
}

// TestReopen: cases and verdicts survive a close and reopen.
func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	a, err := Open(path, DefaultConfig(), Options{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(3, 4))
	a.Record(diag("d-1", "power_cap", t0), fpFor("power_cap", rng))
	if _, err := a.Feedback(context.Background(), "d-1", Verdict{Verdict: VerdictConfirmed}); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b := open(t, path, DefaultConfig(), func() time.Time { return t0 })
	got := b.Similar(fpFor("power_cap", rng), 1)
	if len(got) != 1 || got[0].ID != "d-1" || got[0].Verdict != VerdictConfirmed {
		t.Fatalf("after reopen: %+v", got)
	}
}

// TestSetAsideCorrupt: a database whose pages are overwritten fails to
// open, unless SetAsideCorrupt: then it is renamed to .corrupt, kept whole,
// and a new archive, empty, opened and written in its place. The metrics
// register once on the same registry.
func TestSetAsideCorrupt(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	a, err := Open(path, DefaultConfig(), Options{Now: func() time.Time { return t0 }})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 50 {
		a.Record(diag(fmt.Sprint("d-", i), "power_cap", t0), fpFor("power_cap", rng))
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 4096; i < len(b); i++ { // every page but the first
		b[i] = 'Z'
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, DefaultConfig(), Options{}); err == nil {
		t.Fatal("a corrupt archive opened without SetAsideCorrupt")
	}
	reg := prometheus.NewRegistry()
	c, err := Open(path, DefaultConfig(), Options{Now: func() time.Time { return t0 }, SetAsideCorrupt: true, Registerer: reg})
	if err != nil {
		t.Fatalf("with SetAsideCorrupt: %v", err)
	}
	defer c.Close()
	if c.Len() != 0 {
		t.Fatalf("the new archive holds %d cases", c.Len())
	}
	c.Record(diag("after", "power_cap", t0), fpFor("power_cap", rng))
	if _, err := c.Get(context.Background(), "after"); err != nil {
		t.Fatalf("the new archive does not keep a case: %v", err)
	}
	// Kept (SQLite's attempt to open it may have rewritten a page).
	if kept, err := os.ReadFile(path + ".corrupt"); err != nil || len(kept) != len(b) || !bytes.HasPrefix(kept, []byte("SQLite format 3\x00")) {
		t.Fatalf("the corrupt file was not kept: %d bytes of %d, %v", len(kept), len(b), err)
	}
}

// TestRetention: cases not updated within the retention are deleted at
// open and as time passes.
func TestRetention(t *testing.T) {
	path := filepath.Join(t.TempDir(), FileName)
	now := t0
	clock := func() time.Time { return now }
	a := open(t, path, Config{Retention: model.Duration(48 * time.Hour)}, clock)
	rng := rand.New(rand.NewPCG(5, 6))
	a.Record(diag("old", "power_cap", t0.Add(-72*time.Hour)), fpFor("power_cap", rng))
	a.Record(diag("new", "power_cap", t0), fpFor("power_cap", rng))
	now = t0.Add(2 * time.Hour) // the next record trims
	a.Record(diag("newer", "power_cap", now), fpFor("power_cap", rng))
	if a.Len() != 2 {
		t.Fatalf("%d cases after retention, want 2", a.Len())
	}
	if _, err := a.Get(context.Background(), "old"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the old case is still there: %v", err)
	}
}

// TestExportImportTwice: an import into another archive reproduces the
// cases and verdicts; importing the same file again adds nothing.
func TestExportImportTwice(t *testing.T) {
	ctx := context.Background()
	a := open(t, filepath.Join(t.TempDir(), FileName), DefaultConfig(), func() time.Time { return t0 })
	rng := rand.New(rand.NewPCG(7, 8))
	for i, c := range []string{"power_cap", "kv_cache_eviction_storm", "power_cap"} {
		a.Record(diag(fmt.Sprintf("d-%d", i), c, t0.Add(time.Duration(i)*time.Hour)), fpFor(c, rng))
	}
	if _, err := a.Feedback(ctx, "d-1", Verdict{Verdict: VerdictRejected, Note: "a deploy"}); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	n, err := a.Export(ctx, &buf)
	if err != nil || n != 3 {
		t.Fatalf("exported %d: %v", n, err)
	}
	b := open(t, filepath.Join(t.TempDir(), FileName), DefaultConfig(), func() time.Time { return t0 })
	res, err := b.Import(ctx, bytes.NewReader(buf.Bytes()))
	if err != nil || res.Cases != 3 || res.Verdicts != 1 {
		t.Fatalf("first import %+v: %v", res, err)
	}
	res, err = b.Import(ctx, bytes.NewReader(buf.Bytes()))
	if err != nil || res.Cases != 0 || res.Verdicts != 0 || res.Skipped != 3 {
		t.Fatalf("second import added something: %+v: %v", res, err)
	}
	var again bytes.Buffer
	if _, err := b.Export(ctx, &again); err != nil {
		t.Fatal(err)
	}
	if again.String() != buf.String() {
		t.Fatalf("export of the import differs:\n%s\nwant\n%s", again.String(), buf.String())
	}
	old := open(t, filepath.Join(t.TempDir(), FileName), Config{Retention: model.Duration(24 * time.Hour)}, func() time.Time { return t0.Add(30 * 24 * time.Hour) })
	if res, err := old.Import(ctx, bytes.NewReader(buf.Bytes())); err != nil || res.Expired != 3 || old.Len() != 0 {
		t.Fatalf("an import of cases older than the retention: %+v %v, %d cases", res, err, old.Len())
	}
	if _, err := b.Import(ctx, strings.NewReader("{not json}\n")); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("a malformed line: %v", err)
	}
}

// TestRerank: confirmed similar cases raise their cause, rejected ones lower
// it, dissimilar or verdict-less ones do nothing, and the move is bounded.
func TestRerank(t *testing.T) {
	d := diagnose.Diagnosis{Cause: "request_queue_backlog", Confidence: 0.7, Candidates: []diagnose.Candidate{
		{Cause: "request_queue_backlog", Score: 0.7}, {Cause: "kv_cache_eviction_storm", Score: 0.6},
	}}
	same := func(cause, verdict string, sim float64, n int) []diagnose.SimilarCase {
		return slices.Repeat([]diagnose.SimilarCase{{Cause: cause, Verdict: verdict, Similarity: sim}}, n)
	}
	cases := []struct {
		name      string
		similar   []diagnose.SimilarCase
		cause     string
		top       float64
		unchanged bool
	}{
		{"no verdicts", same("kv_cache_eviction_storm", "", 1, 3), "request_queue_backlog", 0.7, true},
		{"too dissimilar", same("kv_cache_eviction_storm", VerdictConfirmed, 0.7, 3), "request_queue_backlog", 0.7, true},
		{"confirmed storm wins", same("kv_cache_eviction_storm", VerdictConfirmed, 1, 1), "kv_cache_eviction_storm", 0.75, false},
		{"bounded", same("kv_cache_eviction_storm", VerdictConfirmed, 1, 100), "kv_cache_eviction_storm", 0.9, false},
		{"rejected backlog loses", same("request_queue_backlog", VerdictRejected, 1, 1), "kv_cache_eviction_storm", 0.6, false},
		{"relabelled adds a cause", same("power_cap", VerdictRelabelled, 1, 3), "request_queue_backlog", 0.7, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := d
			in.SimilarCases = tc.similar
			got := Rerank(in)
			// The first candidate's score is raw; the confidence is
			// its calibrated value (unchanged without verdicts).
			conf := diagnose.Calibrate(tc.top)
			if tc.unchanged {
				conf = d.Confidence
			}
			if got.Cause != tc.cause || got.Candidates[0].Score != tc.top || got.Confidence != conf {
				t.Errorf("cause %s (score %.3f, confidence %.3f), want %s (%.3f, %.3f); candidates %v", got.Cause, got.Candidates[0].Score, got.Confidence, tc.cause, tc.top, conf, got.Candidates)
			}
			if tc.unchanged != slices.Equal(got.Candidates, d.Candidates) {
				t.Errorf("candidates %v (unchanged: want %v)", got.Candidates, tc.unchanged)
			}
			for _, c := range got.Candidates {
				var orig float64
				for _, o := range d.Candidates {
					if o.Cause == c.Cause {
						orig = o.Score
					}
				}
				if c.Score-orig > MaxAdjust+1e-9 || orig-c.Score > MaxAdjust+1e-9 || c.Score < 0 || c.Score > 1 {
					t.Errorf("candidate %v moved beyond the bound from %v", c, orig)
				}
			}
		})
	}
	unknown := diagnose.Diagnosis{Cause: diagnose.CauseUnknown, Candidates: []diagnose.Candidate{{Cause: "power_cap", Score: 0.1}},
		SimilarCases: same("thermal_throttle", VerdictConfirmed, 1, 5)}
	if got := Rerank(unknown); got.Cause != diagnose.CauseUnknown {
		t.Errorf("a cause-unknown diagnosis took %s from a bounded move below %v", got.Cause, MinArchiveScore)
	}
}

// TestFeedbackHandler: the endpoint's answers for a good body, an unknown
// id, an unknown cause, a bad verdict and malformed or oversized bodies.
func TestFeedbackHandler(t *testing.T) {
	a := open(t, filepath.Join(t.TempDir(), FileName), DefaultConfig(), func() time.Time { return t0 })
	a.Record(diag("d-1", "power_cap", t0), fpFor("power_cap", rand.New(rand.NewPCG(9, 9))))
	mux := http.NewServeMux()
	mux.Handle("POST /api/v1/diagnoses/{id}/feedback", NewFeedbackHandler(a))
	cases := []struct {
		name, id, body string
		code           int
		msg            string
	}{
		{"confirmed", "d-1", `{"verdict":"confirmed","note":"yes"}`, 200, `"verdict":"confirmed"`},
		{"relabelled", "d-1", `{"verdict":"relabelled","cause":"thermal_throttle"}`, 200, `"cause":"thermal_throttle"`},
		{"unknown id", "d-2", `{"verdict":"confirmed"}`, 404, "no diagnosis d-2"},
		{"unknown cause", "d-1", `{"verdict":"relabelled","cause":"cosmic_rays"}`, 400, `unknown cause \"cosmic_rays\"`},
		{"bad verdict", "d-1", `{"verdict":"perhaps"}`, 400, "want confirmed, rejected or relabelled"},
		{"malformed", "d-1", `{"verdict":`, 400, "body must be JSON"},
		{"unknown field", "d-1", `{"verdict":"confirmed","score":1}`, 400, "unknown field"},
		{"too large", "d-1", `{"note":"` + strings.Repeat("x", 70<<10) + `"}`, 413, "larger than"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/api/v1/diagnoses/"+tc.id+"/feedback", strings.NewReader(tc.body)))
			if rec.Code != tc.code || !strings.Contains(rec.Body.String(), tc.msg) {
				t.Errorf("%d %s, want %d containing %q", rec.Code, rec.Body.String(), tc.code, tc.msg)
			}
		})
	}
}

// TestBackupTo: a backup of an open archive, written while it is open,
// opens as an archive with its cases and verdicts; an existing target is
// refused, not overwritten.
func TestBackupTo(t *testing.T) {
	dir := t.TempDir()
	a := open(t, filepath.Join(dir, FileName), DefaultConfig(), func() time.Time { return t0 })
	rng := rand.New(rand.NewPCG(5, 6))
	a.Record(diag("d-1", "power_cap", t0), fpFor("power_cap", rng))
	a.Record(diag("d-2", "prefix_cache_collapse", t0.Add(time.Hour)), fpFor("prefix_cache_collapse", rng))
	if _, err := a.Feedback(context.Background(), "d-1", Verdict{Verdict: VerdictConfirmed}); err != nil {
		t.Fatal(err)
	}
	backup := filepath.Join(dir, "backup", FileName)
	if err := os.Mkdir(filepath.Dir(backup), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := a.BackupTo(backup); err != nil {
		t.Fatal(err)
	}
	a.Record(diag("d-3", "power_cap", t0.Add(2*time.Hour)), fpFor("power_cap", rng)) // after: not in the backup
	if err := a.BackupTo(backup); err == nil {
		t.Fatal("a backup over an existing file: no error")
	}
	b := open(t, backup, DefaultConfig(), func() time.Time { return t0 })
	if b.Len() != 2 {
		t.Fatalf("the backup holds %d cases, want 2", b.Len())
	}
	if got := b.Similar(fpFor("power_cap", rng), 1); len(got) != 1 || got[0].ID != "d-1" || got[0].Verdict != VerdictConfirmed {
		t.Fatalf("the backup's nearest power_cap case: %+v", got)
	}
}
