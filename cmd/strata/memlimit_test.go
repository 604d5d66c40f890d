package main

import (
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

// fakeRoot writes files (path relative to the root -> content) under a
// temporary root.
func fakeRoot(t *testing.T, files map[string]string) memorySources {
	t.Helper()
	root := t.TempDir()
	for p, content := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return memorySources{root: root}
}

func TestMemoryLimit(t *testing.T) {
	const meminfo = "MemTotal:       24683548 kB\nMemFree:         1000000 kB\n"
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  int64
		from  string
	}{
		{"cgroup v2, the tightest ancestor wins", map[string]string{
			"proc/self/cgroup": "0::/kubepods/pod1/strata\n",
			"sys/fs/cgroup/kubepods/pod1/strata/memory.max": "max\n",
			"sys/fs/cgroup/kubepods/pod1/memory.max":        "2147483648\n",
			"sys/fs/cgroup/kubepods/memory.max":             "8589934592\n",
			"proc/meminfo":                                  meminfo,
		}, 2 << 30, "cgroup v2"},
		{"cgroup v2 without a limit: system memory", map[string]string{
			"proc/self/cgroup":         "0::/\n",
			"sys/fs/cgroup/memory.max": "max\n",
			"proc/meminfo":             meminfo,
		}, 24683548 << 10, "system memory"},
		{"cgroup v1", map[string]string{
			"proc/self/cgroup":                           "12:memory:/docker/abc\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "1073741824\n",
			"proc/meminfo":                               meminfo,
		}, 1 << 30, "cgroup v1"},
		{"cgroup v1, the process's own cgroup below the mount", map[string]string{
			"proc/self/cgroup":                                        "5:cpu,cpuacct:/\n4:memory:/batch/strata\n",
			"sys/fs/cgroup/memory/memory.limit_in_bytes":              "9223372036854771712\n",
			"sys/fs/cgroup/memory/batch/memory.limit_in_bytes":        "4294967296\n",
			"sys/fs/cgroup/memory/batch/strata/memory.limit_in_bytes": "503316480\n",
			"proc/meminfo": meminfo,
		}, 480 << 20, "cgroup v1"},
		{"cgroup v1 unlimited: system memory", map[string]string{
			"sys/fs/cgroup/memory/memory.limit_in_bytes": "9223372036854771712\n",
			"proc/meminfo": meminfo,
		}, 24683548 << 10, "system memory"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, from, err := fakeRoot(t, tc.files).memoryLimit()
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || from != tc.from {
				t.Fatalf("limit %d from %s, want %d from %s", got, from, tc.want, tc.from)
			}
		})
	}
	if _, _, err := fakeRoot(t, nil).memoryLimit(); err == nil {
		t.Fatal("no limit and no meminfo gave no error")
	}
}

// TestMemoryPolicyApply: GOGC and GOMEMLIMIT are set from the policy unless
// the environment sets them.
func TestMemoryPolicyApply(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	src := fakeRoot(t, map[string]string{
		"proc/self/cgroup":                "0::/strata\n",
		"sys/fs/cgroup/strata/memory.max": "1000000000\n",
	})
	logger := slog.New(slog.DiscardHandler)
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	if err := (memoryPolicy{gogc: 60, autoLimit: true, ratio: 0.9}).apply(src, logger); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetGCPercent(100); got != 60 {
		t.Errorf("GOGC %d, want 60", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 900_000_000 {
		t.Errorf("GOMEMLIMIT %d, want 900000000", got)
	}

	debug.SetMemoryLimit(1 << 40)
	t.Setenv("GOGC", "200")
	t.Setenv("GOMEMLIMIT", "5GiB")
	if err := (memoryPolicy{gogc: 60, autoLimit: true, ratio: 0.9}).apply(src, logger); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetGCPercent(100); got != 100 {
		t.Errorf("GOGC from the environment overridden: %d", got)
	}
	if got := debug.SetMemoryLimit(-1); got != 1<<40 {
		t.Errorf("GOMEMLIMIT from the environment overridden: %d", got)
	}
	if err := (memoryPolicy{gogc: 60, autoLimit: true, ratio: 1.5}).apply(src, logger); err == nil {
		t.Error("a ratio above 1 was accepted")
	}
	if err := (memoryPolicy{gogc: 60, ratio: 0.9, pacer: true}).apply(src, logger); err == nil {
		t.Error("the heap pacer with no headroom was accepted")
	}
}
