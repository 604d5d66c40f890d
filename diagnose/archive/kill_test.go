package archive

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

const childEnv = "STRATA_ARCHIVE_KILL_CHILD"

// TestSurvivesKill runs a process that records diagnoses as fast as it can,
// printing the number of each committed record, kills it with SIGKILL in
// the middle, and checks that the database is intact, holds every record
// the process reported, and takes new records.
func TestSurvivesKill(t *testing.T) {
	if path := os.Getenv(childEnv); path != "" {
		killChild(path)
		return
	}
	if testing.Short() {
		t.Skip("runs a child process")
	}
	path := filepath.Join(t.TempDir(), FileName)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestSurvivesKill$")
	cmd.Env = append(os.Environ(), childEnv+"="+path)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	last := -1
	for sc.Scan() && last < 300 {
		if n, err := strconv.Atoi(sc.Text()); err == nil {
			last = n
		}
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no deferred Close runs
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if last < 300 {
		t.Fatalf("the child reported only %d records before it ended", last+1)
	}
	a := open(t, path, DefaultConfig(), func() time.Time { return t0 })
	var check string
	if err := a.db.QueryRow(`PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
		t.Fatalf("integrity check after kill -9: %q %v", check, err)
	}
	if a.Len() < last+1 {
		t.Fatalf("%d cases after kill -9, the child had committed %d", a.Len(), last+1)
	}
	for i := 0; i <= last; i++ {
		if _, err := a.Get(context.Background(), fmt.Sprintf("d-%06d", i)); err != nil {
			t.Fatalf("committed case %d lost: %v", i, err)
		}
	}
	a.Record(diag("after", "power_cap", t0), fpFor("power_cap", rand.New(rand.NewPCG(1, 1))))
	if _, err := a.Get(context.Background(), "after"); err != nil {
		t.Fatalf("recording after the restart: %v", err)
	}
}

// killChild records until killed (at most 100,000 records).
func killChild(path string) {
	a, err := Open(path, DefaultConfig(), Options{Now: func() time.Time { return t0 }})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	rng := rand.New(rand.NewPCG(2, 2))
	w := bufio.NewWriter(os.Stdout)
	for i := range 100_000 {
		a.Record(diag(fmt.Sprintf("d-%06d", i), "power_cap", t0.Add(time.Duration(i)*time.Second)), fpFor("power_cap", rng))
		fmt.Fprintln(w, i)
		_ = w.Flush()
	}
	os.Exit(0)
}
