package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCheckConfig: `strata check config` passes a configuration whose
// named files load, saying what they hold, and fails one naming every
// problem at once (a rule that does not parse, a missing rule file, a bad
// web configuration file, an unknown objstore type), with exit status 1
// for the command.
func TestCheckConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	write("rules/a.yml", "groups:\n  - name: a\n    rules:\n      - record: a:up\n        expr: sum(up)\n      - alert: Down\n        expr: up == 0\n")
	write("rules/b.yml", "groups:\n  - name: b\n    rules:\n      - record: b:up\n        expr: count(up)\n")
	good := write("good.yml", "rules:\n  files: ["+filepath.Join(dir, "rules", "*.yml")+"]\n")
	bad := write("bad.yml", "rules:\n  files: ["+write("broken.yml", "groups:\n  - name: c\n    rules:\n      - record: c:up\n        expr: sum(up\n")+", "+filepath.Join(dir, "missing.yml")+"]\n"+
		"web:\n  config_file: "+write("web.yml", "tls_server_config:\n  cert_file: /nonexistent.crt\n")+"\n"+
		"storage:\n  objstore:\n    config_file: "+write("objstore.yml", "type: FTP\n")+"\n")

	summary, err := checkConfigFile(good)
	if err != nil || !strings.Contains(summary, "2 rule files (3 rules)") || !strings.Contains(summary, "diagnosis rules:") {
		t.Fatalf("good configuration: %q, %v", summary, err)
	}
	_, err = checkConfigFile(bad)
	if err == nil {
		t.Fatal("bad configuration: no error")
	}
	for _, want := range []string{"broken.yml", "unclosed left parenthesis", "missing.yml: no such file", "web.config_file", "FTP"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("bad configuration's error lacks %q:\n%v", want, err)
		}
	}
	if _, err := checkConfigFile(write("unknown.yml", "web:\n  listen_addr: x\n")); err == nil || !strings.Contains(err.Error(), "listen_addr") {
		t.Errorf("an unknown key: %v", err)
	}

	var out bytes.Buffer
	c := &checkCommand{files: []string{good, bad}}
	if err := c.run(&out); err == nil || !strings.Contains(err.Error(), "1 of 2") {
		t.Errorf("run over a good and a bad file: %v", err)
	}
	if !strings.Contains(out.String(), "SUCCESS") || !strings.Contains(out.String(), "FAILED") {
		t.Errorf("run's output:\n%s", out.String())
	}
}
