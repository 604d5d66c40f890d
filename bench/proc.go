package bench

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// userHZ is the unit of utime and stime in /proc/<pid>/stat. It is 100 on
// every Linux architecture Go supports (USER_HZ is fixed by the kernel ABI,
// independent of CONFIG_HZ), so no sysconf call (and no cgo) is needed.
const userHZ = 100

// ProcSample is one reading of a server process' resource use.
type ProcSample struct {
	// CPUSeconds is user plus system CPU time since the process started.
	CPUSeconds float64 `json:"cpu_seconds"`
	// RSSBytes is the resident set size now (VmRSS); HWMBytes is its peak
	// since the process started (VmHWM).
	RSSBytes int64 `json:"rss_bytes"`
	HWMBytes int64 `json:"hwm_bytes"`
	// RSSAnonBytes is the anonymous part of RSSBytes (RssAnon): the
	// process' own memory, without the file pages it maps (its binary,
	// files read through mappings, such as a TSDB's chunk files), which
	// the kernel may drop and read again. 0 when the kernel does not give
	// it (before Linux 4.5).
	RSSAnonBytes int64 `json:"rss_anon_bytes,omitempty"`
}

// ReadProc reads the CPU time and memory of process pid from procRoot
// (normally "/proc").
func ReadProc(procRoot string, pid int) (ProcSample, error) {
	dir := filepath.Join(procRoot, strconv.Itoa(pid))
	stat, err := os.ReadFile(filepath.Join(dir, "stat"))
	if err != nil {
		return ProcSample{}, fmt.Errorf("read process stat: %w", err)
	}
	cpu, err := parseStatCPU(stat)
	if err != nil {
		return ProcSample{}, fmt.Errorf("parse %s/stat: %w", dir, err)
	}
	status, err := os.ReadFile(filepath.Join(dir, "status"))
	if err != nil {
		return ProcSample{}, fmt.Errorf("read process status: %w", err)
	}
	mem, err := parseStatusMemory(status)
	if err != nil {
		return ProcSample{}, fmt.Errorf("parse %s/status: %w", dir, err)
	}
	mem.CPUSeconds = cpu
	return mem, nil
}

var errProcFormat = errors.New("unexpected format")

// parseStatCPU returns utime+stime in seconds from the contents of
// /proc/<pid>/stat. The command name (field 2) is in parentheses and may hold
// spaces and parentheses itself, so fields are counted from the last ')'.
func parseStatCPU(stat []byte) (float64, error) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("%w: no command name", errProcFormat)
	}
	// After ')' come fields 3 (state) onwards; utime and stime are fields
	// 14 and 15, so indexes 11 and 12 here.
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("%w: %d fields after the command name", errProcFormat, len(f))
	}
	ut, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime: %w", err)
	}
	st, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime: %w", err)
	}
	return float64(ut+st) / userHZ, nil
}

// parseStatusMemory returns VmRSS, VmHWM and RssAnon in bytes from the
// contents of /proc/<pid>/status (where they are given in kB); RssAnon may
// be missing.
func parseStatusMemory(status []byte) (ProcSample, error) {
	var s ProcSample
	var seenRSS, seenHWM bool
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || (name != "VmRSS" && name != "VmHWM" && name != "RssAnon") {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return s, fmt.Errorf("%w: %s line %q", errProcFormat, name, rest)
		}
		kb, err := strconv.ParseUint(f[0], 10, 43) // 2^43 kB = 8 EiB: no overflow in bytes
		if err != nil {
			return s, fmt.Errorf("%s: %w", name, err)
		}
		switch name {
		case "VmRSS":
			s.RSSBytes, seenRSS = int64(kb)*1024, true
		case "VmHWM":
			s.HWMBytes, seenHWM = int64(kb)*1024, true
		default:
			s.RSSAnonBytes = int64(kb) * 1024
		}
	}
	if err := sc.Err(); err != nil {
		return s, fmt.Errorf("scan: %w", err)
	}
	if !seenRSS || !seenHWM {
		return s, fmt.Errorf("%w: VmRSS or VmHWM missing (kernel thread or zombie?)", errProcFormat)
	}
	return s, nil
}

// DirSize is the total size in bytes of the regular files under dir. Files
// that vanish during the walk (a TSDB compacting, a WAL segment truncated)
// are skipped rather than failing the measurement.
func DirSize(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path != dir {
				return nil
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		total += info.Size()
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("walk %s: %w", dir, err)
	}
	return total, nil
}
