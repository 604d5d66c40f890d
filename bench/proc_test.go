package bench

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

func TestReadProcSelf(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("/proc is Linux only")
	}
	s, err := ReadProc("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s.RSSBytes <= 0 || s.HWMBytes < s.RSSBytes {
		t.Fatalf("RSS %d, HWM %d: want 0 < RSS <= HWM", s.RSSBytes, s.HWMBytes)
	}
	// Burn a bounded amount of CPU and check the counter moves forward.
	x := 0
	for i := range 50_000_000 {
		x ^= i * 31
	}
	s2, err := ReadProc("/proc", os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if s2.CPUSeconds < s.CPUSeconds || s2.CPUSeconds <= 0 {
		t.Fatalf("CPU went from %g to %g (x=%d)", s.CPUSeconds, s2.CPUSeconds, x)
	}
	if _, err := ReadProc("/proc", 1<<30); err == nil {
		t.Fatal("no error for a process that does not exist")
	}
}

func TestParseStatCPU(t *testing.T) {
	tail := " S 1 2 3 4 5 6 7 8 9 10 250 130 0 0 20 0 1 0 100 200 300"
	for _, tc := range []struct {
		name    string
		stat    string
		want    float64
		wantErr bool
	}{
		{"plain", "42 (strata)" + tail, 3.8, false},
		{"name with spaces and parens", "42 (my (odd) prog)" + tail, 3.8, false},
		{"no parens", "42 strata" + tail, 0, true},
		{"truncated", "42 (strata) S 1 2 3", 0, true},
		{"bad number", "42 (strata) S 1 2 3 4 5 6 7 8 9 10 x 130 0", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatCPU([]byte(tc.stat))
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if !tc.wantErr && got != tc.want {
				t.Fatalf("got %g CPU-seconds, want %g", got, tc.want)
			}
		})
	}
}

func TestParseStatusMemory(t *testing.T) {
	ok := "Name:\tstrata\nVmPeak:\t  9000 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\nThreads:\t8\n"
	got, err := parseStatusMemory([]byte(ok))
	if err != nil || got != (ProcSample{RSSBytes: 1024 * 1024, HWMBytes: 2048 * 1024}) {
		t.Fatalf("got %+v err %v", got, err)
	}
	// Linux 4.5 and later also give RSS by kind.
	ok = "VmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\nRssAnon:\t     700 kB\nRssFile:\t     324 kB\n"
	got, err = parseStatusMemory([]byte(ok))
	if err != nil || got != (ProcSample{RSSBytes: 1024 * 1024, HWMBytes: 2048 * 1024, RSSAnonBytes: 700 * 1024}) {
		t.Fatalf("got %+v err %v", got, err)
	}
	for _, bad := range []string{
		"Name:\tkthreadd\nThreads:\t1\n",
		"VmHWM:\t2048 kB\nVmRSS:\tlots kB\n",
		"VmHWM:\t2048 MB\nVmRSS:\t1 kB\n",
		"VmHWM:\t2048 kB\nVmRSS:\t1 kB\nRssAnon:\t-1 kB\n",
	} {
		if _, err := parseStatusMemory([]byte(bad)); err == nil {
			t.Errorf("accepted %q", bad)
		}
	}
}

func FuzzParseProc(f *testing.F) {
	f.Add([]byte("42 (strata) S 1 2 3 4 5 6 7 8 9 10 250 130 0 0 20"))
	f.Add([]byte("VmHWM:\t2048 kB\nVmRSS:\t1024 kB\n"))
	f.Add([]byte("1 ()) ) )"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if cpu, err := parseStatCPU(b); err == nil && cpu < 0 {
			t.Fatalf("negative CPU %g", cpu)
		}
		if m, err := parseStatusMemory(b); err == nil && (m.RSSBytes < 0 || m.HWMBytes < 0 || m.RSSAnonBytes < 0) {
			t.Fatalf("negative memory %+v", m)
		}
	})
}

func TestDirSize(t *testing.T) {
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "wal"), 0o755); err != nil {
		t.Fatal(err)
	}
	for path, n := range map[string]int{"a": 100, "wal/000001": 3000, "wal/000002": 7} {
		if err := os.WriteFile(filepath.Join(dir, path), make([]byte, n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(dir, "a"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	got, err := DirSize(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got != 3107 {
		t.Fatalf("got %d bytes, want 3107 (symlinks not followed)", got)
	}
	if _, err := DirSize(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("no error for a missing tier directory")
	}
}
