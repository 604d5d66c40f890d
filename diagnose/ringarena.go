package diagnose

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// pageArena hands out the hourly rings' pages (ringPage) from a file
// mapped into memory instead of the Go heap. After four weeks a tracked
// series holds 26 pages (5.8 KB: 550 MB at 500,000 active series, whose
// ~91,000 tracked signal series a Prometheus does not have), yet a ring is
// touched once an hour, when its series' hour rolls (finish, hourBaseline).
// In the file the pages live in the kernel's page cache: after each
// minute that touched one, release drops the mapping's pages from the
// process (madvise MADV_DONTNEED keeps a shared file mapping's contents),
// so they are not resident memory of Strata's, and the kernel may write
// them out and read them back an hour later as it does any file's.
//
// The file is a scratch file, unlinked as soon as it is opened: its pages
// are derived from the minute tier, which a tracker reads back when it
// starts (bootstrap.go; or restores from its checkpoints, checkpoint.go,
// which hold the same summaries in files of their own), so nothing of it
// outlives the process. It grows
// by arenaChunk, each chunk fallocated before it is mapped, so that a full
// disk fails the growth (and the arena hands out heap pages from then on)
// instead of a write into the mapping. Where mapping files is not
// supported, or the file cannot be made, the arena hands out heap pages
// (as a nil arena does, for tests).
//
// An arena is used by its tracker's goroutine only; the page counts are
// atomic for the metrics.
type pageArena struct {
	f       *os.File
	chunks  [][]byte // chunk i maps the file's bytes [i*arenaChunk, (i+1)*arenaChunk)
	next    int      // pages handed out of the last chunk
	free    []*ringPage
	touched bool // a page was read or written since the last release
	err     error
	logger  *slog.Logger // told when the file stops growing (nil: nobody)
	// inFile and inHeap are the pages held by rings, in the file and (the
	// arena failed, or none) on the heap.
	inFile, inHeap atomic.Int64
}

// arenaChunk is the file's growth: 37,449 pages, about 1,440 series'
// four-week rings.
const arenaChunk = 8 << 20

const ringPageBytes = int(unsafe.Sizeof(ringPage{}))

var errNoArena = errors.New("baseline ring file: not supported on this platform")

// newPageArena opens an arena's file in dir (the temporary directory when
// empty). When it cannot, the arena hands out heap pages, and the error
// says why.
func newPageArena(dir string) (*pageArena, error) {
	if !arenaSupported {
		return &pageArena{err: errNoArena}, errNoArena
	}
	if dir == "" {
		dir = os.TempDir()
	}
	f, err := os.CreateTemp(dir, "strata-baseline-ring-*")
	if err == nil {
		if err = os.Remove(f.Name()); err != nil {
			_ = f.Close()
		}
	}
	if err != nil {
		err = fmt.Errorf("baseline ring file: %w", err)
		return &pageArena{err: err}, err
	}
	return &pageArena{f: f}, nil
}

// registerRingBytes exports how many bytes of rings the arena holds in
// its file and on the heap.
func registerRingBytes(reg prometheus.Registerer, a *pageArena) {
	for where, n := range map[string]*atomic.Int64{"file": &a.inFile, "heap": &a.inHeap} {
		promauto.With(reg).NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "strata_diagnose_baseline_ring_bytes",
			Help:        "Bytes of the baselines' hourly summaries (26 pages of 224 bytes a tracked series after four weeks), in the scratch file (page cache, not the process' memory) or on the heap (the file could not be made or grow).",
			ConstLabels: prometheus.Labels{"where": where},
		}, func() float64 { return float64(n.Load()) * float64(ringPageBytes) })
	}
}

// page returns a zeroed page: a freed one, else the next of the file's,
// else (no arena, or its file could not grow) a heap one.
func (a *pageArena) page() *ringPage {
	if a == nil {
		return new(ringPage)
	}
	a.touched = true
	if n := len(a.free); n > 0 {
		p := a.free[n-1]
		a.free = a.free[:n-1]
		*p = ringPage{}
		a.inFile.Add(1)
		return p
	}
	if a.err == nil && (len(a.chunks) == 0 || a.next*ringPageBytes+ringPageBytes > arenaChunk) {
		if a.err = a.grow(); a.err != nil && a.logger != nil {
			a.logger.Warn("keeping new baseline summaries on the heap", "err", a.err)
		}
	}
	if a.err != nil {
		a.inHeap.Add(1)
		return new(ringPage)
	}
	c := a.chunks[len(a.chunks)-1]
	p := (*ringPage)(unsafe.Pointer(&c[a.next*ringPageBytes]))
	a.next++
	a.inFile.Add(1)
	return p
}

// put takes back the pages of a forgotten ring: the file's for reuse, the
// heap's for the collector.
func (a *pageArena) put(pages []*ringPage) {
	for _, p := range pages {
		if p == nil {
			continue
		}
		if a == nil || !a.holds(p) {
			if a != nil {
				a.inHeap.Add(-1)
			}
			continue
		}
		a.free = append(a.free, p)
		a.inFile.Add(-1)
	}
}

// holds reports whether p is one of the file's pages.
func (a *pageArena) holds(p *ringPage) bool {
	u := uintptr(unsafe.Pointer(p))
	for _, c := range a.chunks {
		if b := uintptr(unsafe.Pointer(unsafe.SliceData(c))); u >= b && u < b+uintptr(len(c)) {
			return true
		}
	}
	return false
}

// touch records that pages are read (release drops them afterwards).
func (a *pageArena) touch() {
	if a != nil {
		a.touched = true
	}
}

// release drops the file's pages from the process' memory once a minute
// has touched them; their contents stay in the file (page cache). It
// cannot fail on a mapping of the arena's own (madvise fails only for an
// address range that is not one); a page it failed to drop would stay
// resident, as a heap page does.
func (a *pageArena) release() {
	if a == nil || !a.touched {
		return
	}
	a.touched = false
	for _, c := range a.chunks {
		_ = dropPages(c)
	}
}

// close unmaps the file and closes it: after its tracker is unreachable,
// and with it every page handed out.
func (a *pageArena) close() {
	for _, c := range a.chunks {
		_ = unmapChunk(c)
	}
	a.chunks = nil
	if a.f != nil {
		_ = a.f.Close()
	}
}

// grow extends the file by a chunk and maps it.
func (a *pageArena) grow() error {
	off := int64(len(a.chunks)) * arenaChunk
	c, err := mapChunk(a.f, off, arenaChunk)
	if err != nil {
		return fmt.Errorf("baseline ring file: growing to %d bytes: %w", off+arenaChunk, err)
	}
	a.chunks = append(a.chunks, c)
	a.next = 0
	return nil
}
