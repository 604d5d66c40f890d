package diagnose

import (
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	defaultrules "github.com/strata-dev/strata/diagnose/rules"
)

// TestDefaultPackPromtool runs `promtool check rules` on every shipped rule
// file and `promtool test rules` on their unit tests, with promtool built
// from this module's Prometheus version.
func TestDefaultPackPromtool(t *testing.T) {
	if testing.Short() {
		t.Skip("builds promtool")
	}
	dir := t.TempDir()
	promtool := filepath.Join(dir, "promtool")
	build := exec.Command("go", "build", "-o", promtool, "github.com/prometheus/prometheus/cmd/promtool")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build promtool: %v\n%s", err, out)
	}
	var rules, tests []string
	err := fs.WalkDir(defaultrules.FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(defaultrules.FS, p)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, p), b, 0o600); err != nil {
			return err
		}
		if strings.HasSuffix(p, ".test.yml") {
			tests = append(tests, p)
		} else if strings.HasSuffix(p, ".yml") {
			rules = append(rules, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if !contains(tests, strings.TrimSuffix(r, ".yml")+".test.yml") {
			t.Errorf("%s has no promtool unit test file", r)
		}
	}
	run := func(args ...string) {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	run(append([]string{"check", "rules"}, rules...)...)
	run(append([]string{"test", "rules"}, tests...)...)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
