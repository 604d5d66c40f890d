package main

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// archivedCase is one exported case (the JSON of archive.Case), from
// yesterday (within the default retention).
var archivedCase = strings.NewReplacer("2026-01-16", time.Now().UTC().Add(-24*time.Hour).Format("2006-01-02")).Replace(`{"id":"d-00000000000000aa","diagnosis":{"id":"d-00000000000000aa","cause":"power_cap","state":"resolved","severity":"warning","dimension":"compute","confidence":0.9,"start":"2026-01-16T03:00:00Z","end":"2026-01-16T03:30:00Z","entities":{"host":"gpu-node-0","gpu":"3"},"candidates":[{"cause":"power_cap","score":0.9}],"symptoms":[],"evidence":[],"actions":[],"rule":"GPUPowerCapped","similar_cases":[],"updated":"2026-01-16T03:30:00Z"},"fingerprint":{"signals":{"strata:gpu_sm_clock:ratio":0.6}},"first_seen":"2026-01-16T03:03:00Z","verdicts":[]}`)

func strataCmd(t *testing.T, stdin io.Reader, args ...string) string {
	t.Helper()
	cmd := exec.Command(strataBinary, args...)
	cmd.Stdin = stdin
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("strata %v: %v\n%s", args, err, errb.String())
	}
	return out.String()
}

func postFeedback(t *testing.T, p *strataProc, id, body string) (int, string) {
	t.Helper()
	return p.post("/api/v1/diagnoses/"+id+"/feedback", "application/json", body)
}

// TestArchiveEndToEnd: serve opens the case archive in its data directory;
// `strata diagnose archive export` reads it beside the running server;
// cases imported while it is stopped take feedback after a restart, which
// the next export shows; unknown ids and causes get 404 and 400.
func TestArchiveEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("runs strata serve")
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	p := startStrata(t, data)
	if _, err := os.Stat(filepath.Join(data, "diagnoses.db")); err != nil {
		t.Fatalf("serve did not create the case archive: %v", err)
	}
	if out := strataCmd(t, nil, "diagnose", "archive", "export", "--storage.path="+data); out != "" {
		t.Fatalf("export of an empty archive beside the server: %q", out)
	}
	if code, body := postFeedback(t, p, "d-00000000000000aa", `{"verdict":"confirmed"}`); code != 404 || !strings.Contains(body, "no diagnosis d-00000000000000aa") {
		t.Fatalf("feedback on an unknown id: %d %s", code, body)
	}
	p.stop()

	export := filepath.Join(dir, "cases.jsonl")
	if err := os.WriteFile(export, []byte(archivedCase+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out := strataCmd(t, nil, "diagnose", "archive", "import", "--storage.path="+data, "--file="+export); !strings.Contains(out, "imported 1 cases") {
		t.Fatalf("import: %q", out)
	}
	if out := strataCmd(t, strings.NewReader(archivedCase+"\n"), "diagnose", "archive", "import", "--storage.path="+data); !strings.Contains(out, "imported 0 cases and 0 verdicts") {
		t.Fatalf("a second import added something: %q", out)
	}

	p = startStrata(t, data)
	if code, body := postFeedback(t, p, "d-00000000000000aa", `{"verdict":"relabelled","cause":"gremlins"}`); code != 400 || !strings.Contains(body, `unknown cause \"gremlins\"`) {
		t.Fatalf("feedback with an unknown cause: %d %s", code, body)
	}
	if code, body := postFeedback(t, p, "d-00000000000000aa", `{"verdict":"relabelled","cause":"thermal_throttle","note":"the fans"}`); code != 200 || !strings.Contains(body, `"note":"the fans"`) {
		t.Fatalf("feedback: %d %s", code, body)
	}
	if out := strataCmd(t, nil, "diagnose", "archive", "export", "--storage.path="+data); !strings.Contains(out, `"verdict":"relabelled","cause":"thermal_throttle"`) {
		t.Fatalf("export after feedback: %q", out)
	}
}
