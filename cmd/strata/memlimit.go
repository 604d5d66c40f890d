package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/alecthomas/kingpin/v2"
)

// defaultGOGC is the garbage collector's target when GOGC is not set in the
// environment: the heap may grow to 1.5x the live heap between collections
// instead of Go's default 2x (Prometheus uses 1.75x). On the paced 50,000
// series fleet it took peak RSS from 512 to 427 MiB at no CPU cost that
// the run could tell (docs/rollups.md, "Memory").
const defaultGOGC = 50

// memoryPolicy is how strata serve sets the Go runtime's memory knobs, the
// way Prometheus does with its runtime.gogc default and --auto-gomemlimit.
type memoryPolicy struct {
	gogc      int     // --runtime.gogc; the GOGC environment variable wins
	autoLimit bool    // --auto-gomemlimit
	ratio     float64 // --auto-gomemlimit.ratio
	pacer     bool    // --runtime.heap-pacer: runHeapPacer
	// --runtime.heap-pacer.headroom: the paced goal's share above the
	// baseline live heap
	pacerHeadroom float64
	// --runtime.heap-pacer.interval: the collection interval the headroom
	// holds at, less headroom where collections would come less often (0:
	// the headroom always; heapPacer.interval)
	pacerInterval time.Duration
	// --runtime.heap-pacer.rise: the time constant with which a rise of the
	// allocation rate reaches the pacer (0: at once; heapPacer.rise)
	pacerRise time.Duration
}

// flags registers the policy's flags common to the commands that set it
// (--runtime.gogc, --auto-gomemlimit, --auto-gomemlimit.ratio) on cmd;
// why is appended to --auto-gomemlimit's help.
func (m *memoryPolicy) flags(cmd *kingpin.CmdClause, why string) {
	cmd.Flag("runtime.gogc", "Go garbage collector target percentage (GOGC) when the GOGC environment variable is not set: lower uses less memory and more CPU.").
		Default(strconv.Itoa(defaultGOGC)).IntVar(&m.gogc)
	cmd.Flag("auto-gomemlimit", "Set GOMEMLIMIT (a soft memory limit for the Go runtime) from the container's memory limit, or the machine's memory, unless GOMEMLIMIT is set in the environment."+why).
		Default("true").BoolVar(&m.autoLimit)
	cmd.Flag("auto-gomemlimit.ratio", "Fraction of the container's or machine's memory that --auto-gomemlimit sets GOMEMLIMIT to.").
		Default("0.9").Float64Var(&m.ratio)
}

// memorySources are the files the limit is read from, for tests.
type memorySources struct {
	root string // "/" in production
}

// apply sets GOGC and the soft memory limit and logs what it set. The limit
// is ratio times the container's memory limit (cgroup v2, else v1), or the
// machine's memory without one; GOMEMLIMIT in the environment wins.
func (m memoryPolicy) apply(src memorySources, logger *slog.Logger) error {
	if m.ratio <= 0 || m.ratio > 1 {
		return fmt.Errorf("--auto-gomemlimit.ratio must be in (0, 1], got %g", m.ratio)
	}
	if m.pacer && m.pacerHeadroom <= 0 {
		return fmt.Errorf("--runtime.heap-pacer.headroom must be above 0, got %g", m.pacerHeadroom)
	}
	if m.pacerInterval < 0 {
		return fmt.Errorf("--runtime.heap-pacer.interval must not be negative, got %s", m.pacerInterval)
	}
	if m.pacerRise < 0 {
		return fmt.Errorf("--runtime.heap-pacer.rise must not be negative, got %s", m.pacerRise)
	}
	gogc := gcPercentOrDefault(m.gogc)
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gogc)
	}
	if !m.autoLimit || os.Getenv("GOMEMLIMIT") != "" {
		logger.Info("Go runtime memory policy", "gogc", gogc, "gomemlimit", os.Getenv("GOMEMLIMIT"))
		return nil
	}
	limit, from, err := src.memoryLimit()
	if err != nil {
		logger.Warn("no memory limit found: GOMEMLIMIT not set", "gogc", gogc, "err", err)
		return nil
	}
	soft := int64(float64(limit) * m.ratio)
	debug.SetMemoryLimit(soft)
	logger.Info("Go runtime memory policy", "gogc", gogc, "gomemlimit", soft, "limit", limit, "from", from)
	return nil
}

// gcPercentOrDefault returns what apply set: GOGC from the environment, or
// gogc.
func gcPercentOrDefault(gogc int) int {
	if v := os.Getenv("GOGC"); v != "" {
		if strings.EqualFold(v, "off") {
			return -1
		}
		if n, err := strconv.Atoi(v); err == nil {
			return n
		}
	}
	return gogc
}

var errNoMemoryLimit = errors.New("no memory limit")

// memoryLimit returns the tightest memory limit that applies to the process:
// its cgroup's (v2 memory.max up the hierarchy, or v1
// memory.limit_in_bytes), else the machine's total memory.
func (s memorySources) memoryLimit() (limit int64, from string, err error) {
	if l, ok := s.cgroupV2Limit(); ok {
		return l, "cgroup v2", nil
	}
	if l, ok := s.cgroupV1Limit(); ok {
		return l, "cgroup v1", nil
	}
	total, err := s.memTotal()
	if err != nil {
		return 0, "", err
	}
	return total, "system memory", nil
}

// cgroupV2Limit walks the process's cgroup v2 path up to the root and
// returns the smallest memory.max.
func (s memorySources) cgroupV2Limit() (int64, bool) {
	data, err := os.ReadFile(filepath.Join(s.root, "proc/self/cgroup"))
	if err != nil {
		return 0, false
	}
	var path string
	for line := range strings.Lines(string(data)) {
		if p, ok := strings.CutPrefix(strings.TrimSpace(line), "0::"); ok {
			path = p
			break
		}
	}
	if path == "" {
		return 0, false
	}
	return s.tightestLimit(filepath.Join(s.root, "sys/fs/cgroup"), path, "memory.max")
}

// cgroupV1Limit returns the smallest memory.limit_in_bytes from the
// process's cgroup v1 memory path (/proc/self/cgroup) up to the hierarchy's
// mount: a container sees its own cgroup at the mount, a process of a host
// (a systemd slice, a cgroup made for it) at its path below it.
func (s memorySources) cgroupV1Limit() (int64, bool) {
	mount := filepath.Join(s.root, "sys/fs/cgroup/memory")
	path := "/"
	if data, err := os.ReadFile(filepath.Join(s.root, "proc/self/cgroup")); err == nil {
		for line := range strings.Lines(string(data)) {
			f := strings.SplitN(strings.TrimSpace(line), ":", 3)
			if len(f) == 3 && slices.Contains(strings.Split(f[1], ","), "memory") {
				path = f[2]
				break
			}
		}
	}
	return s.tightestLimit(mount, path, "memory.limit_in_bytes")
}

// tightestLimit returns the smallest limit in the file named file of the
// cgroup directories under mount from path up to the mount itself.
func (s memorySources) tightestLimit(mount, path, file string) (int64, bool) {
	best, found := int64(math.MaxInt64), false
	for dir := filepath.Clean("/" + path); ; dir = filepath.Dir(dir) {
		if l, ok := s.readLimit(filepath.Join(mount, dir, file)); ok {
			best, found = min(best, l), true
		}
		if dir == "/" {
			break
		}
	}
	return best, found
}

// readLimit reads a cgroup limit file: a byte count, or "max" (none). v1
// reports "none" as a huge number, treated as none.
func (s memorySources) readLimit(path string) (int64, bool) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	v := strings.TrimSpace(string(data))
	if v == "max" {
		return 0, false
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 || n >= 1<<62 {
		return 0, false
	}
	return n, true
}

// memTotal returns MemTotal from /proc/meminfo.
func (s memorySources) memTotal() (int64, error) {
	f, err := os.Open(filepath.Join(s.root, "proc/meminfo"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, errNoMemoryLimit
	}
	if err != nil {
		return 0, err
	}
	defer f.Close() //nolint:errcheck // read only
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("MemTotal:"))
		if !ok {
			continue
		}
		fields := strings.Fields(string(rest))
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("parse MemTotal %q", rest)
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse MemTotal: %w", err)
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errNoMemoryLimit
}
