package main

import (
	"encoding/json"
	"net/http"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime/debug"
	"testing"

	"github.com/prometheus/common/version"
)

func TestFillVersion(t *testing.T) {
	saved := [4]string{version.Version, version.Revision, version.Branch, version.BuildDate}
	t.Cleanup(func() {
		version.Version, version.Revision, version.Branch, version.BuildDate = saved[0], saved[1], saved[2], saved[3]
	})
	vcs := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	for _, tc := range []struct {
		name                 string
		ldflags              [3]string // version, revision, build date set by -ldflags
		bi                   *debug.BuildInfo
		wantVersion, wantRev string
		wantDate             string
		anyRevision          bool
	}{
		{
			name:        "go install of a tagged module",
			bi:          &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}},
			wantVersion: "1.2.3", anyRevision: true,
		},
		{
			name: "go build in a dirty Git checkout",
			bi: &debug.BuildInfo{
				Main:     debug.Module{Version: "v0.0.0-20260101120000-abcdef123456+dirty"},
				Settings: vcs("vcs", "git", "vcs.revision", "abcdef1234567890", "vcs.time", "2026-01-01T12:00:00Z", "vcs.modified", "true"),
			},
			wantVersion: "0.0.0-20260101120000-abcdef123456+dirty", wantRev: "abcdef1234567890-modified", wantDate: "2026-01-01T12:00:00Z",
		},
		{
			name: "go build without VCS information",
			bi:   &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, wantVersion: "devel", anyRevision: true,
		},
		{
			name: "no build information", wantVersion: "devel", anyRevision: true,
		},
		{
			name:    "make build: -ldflags win",
			ldflags: [3]string{"2.0.0", "0123abc", "20260101-12:00:00"},
			bi: &debug.BuildInfo{
				Main:     debug.Module{Version: "v1.2.3"},
				Settings: vcs("vcs.revision", "abcdef1234567890", "vcs.time", "2026-01-01T12:00:00Z"),
			},
			wantVersion: "2.0.0", wantRev: "0123abc", wantDate: "20260101-12:00:00",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			version.Version, version.Revision, version.BuildDate = tc.ldflags[0], tc.ldflags[1], tc.ldflags[2]
			fillVersion(tc.bi)
			if version.Version != tc.wantVersion {
				t.Errorf("Version = %q, want %q", version.Version, tc.wantVersion)
			}
			if tc.anyRevision {
				if version.Revision == "" {
					t.Error("Revision is empty")
				}
			} else if version.Revision != tc.wantRev {
				t.Errorf("Revision = %q, want %q", version.Revision, tc.wantRev)
			}
			if version.BuildDate != tc.wantDate {
				t.Errorf("BuildDate = %q, want %q", version.BuildDate, tc.wantDate)
			}
		})
	}
}

var versionLineRe = regexp.MustCompile(`^strata, version (\S+) \(branch: (\S*), revision: (\S+)\)`)

// TestVersionOfGoBuild: a binary built with plain `go build` (TestMain's)
// reports a version and a revision in --version and in
// /api/v1/status/buildinfo.
func TestVersionOfGoBuild(t *testing.T) {
	out, err := exec.Command(strataBinary, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("strata --version: %v\n%s", err, out)
	}
	m := versionLineRe.FindSubmatch(out)
	if m == nil {
		t.Fatalf("strata --version:\n%s\nwant a version and a revision", out)
	}
	p := startStrata(t, t.TempDir())
	info := buildInfo(t, p.url("/api/v1/status/buildinfo"))
	if info.Version != string(m[1]) || info.Revision != string(m[3]) || info.GoVersion == "" {
		t.Errorf("buildinfo = %+v, want version %s and revision %s as --version says", info, m[1], m[3])
	}
}

// TestVersionOfMakeBuild: `make build` stamps the version, revision, branch,
// build user and date it is given (or computes from Git) into the binary.
func TestVersionOfMakeBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds strata with make: skipped under -short")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make is not installed")
	}
	bin := filepath.Join(t.TempDir(), "strata")
	build := exec.Command("make", "-s", "-C", filepath.Join("..", ".."), "build", "BIN="+bin,
		"VERSION=9.8.7-test", "REVISION=feedbeef", "BRANCH=test-branch")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("make build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("strata --version: %v\n%s", err, out)
	}
	if m := versionLineRe.FindSubmatch(out); m == nil || string(m[1]) != "9.8.7-test" || string(m[2]) != "test-branch" || string(m[3]) != "feedbeef" {
		t.Errorf("strata --version:\n%s\nwant version 9.8.7-test, branch test-branch, revision feedbeef", out)
	}
	for _, field := range []string{"build user", "build date"} {
		if !regexp.MustCompile(`(?m)^\s+` + field + `:\s+\S+`).Match(out) {
			t.Errorf("strata --version has no %s:\n%s", field, out)
		}
	}
}

type buildInfoData struct {
	Version, Revision, Branch, BuildUser, BuildDate, GoVersion string
}

func buildInfo(t *testing.T, url string) buildInfoData {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string        `json:"status"`
		Data   buildInfoData `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Status != "success" {
		t.Fatalf("buildinfo: status %q, %v", body.Status, err)
	}
	return body.Data
}
