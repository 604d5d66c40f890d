package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/strata-dev/strata/diagnose/archive"
	"github.com/strata-dev/strata/internal/atomicfile"
	"github.com/strata-dev/strata/tiers"
)

// snapshotsDir is where snapshots are written, under the storage path, as
// Prometheus writes its own under its data directory.
const snapshotsDir = "snapshots"

// errAdminDisabled is Prometheus' answer to an admin API call without
// --web.enable-admin-api.
var errAdminDisabled = errors.New("admin APIs disabled")

// snapshot writes a copy of the storage as it is now to
// <storage.path>/snapshots/<name>/, laid out as a storage path, so that
// `strata serve --storage.path=<it>` (or a copy of it elsewhere) starts
// from it: the raw tier's blocks and, unless skipHead, its head and
// out-of-order head written as blocks (Prometheus' TSDB snapshot); the
// minute and hour tiers' partition files, hard links (they are final once
// written, and replaced, never changed); the remote-write metadata (a hard
// link too, saved first); the
// case archive (a consistent copy); the baseline checkpoints (hard
// links). The rollup pipeline's open hours are not copied: a server
// started on the snapshot recomputes them from its raw tier, as after a
// crash. It is written under a temporary name and renamed when complete
// (the next snapshot removes one a crash left). It returns the snapshot's
// name.
func (s *server) snapshot(ctx context.Context, skipHead bool) (string, error) {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if s.disk != nil {
		if err := s.disk.Err(); err != nil {
			return "", err
		}
	}
	start := time.Now()
	root := filepath.Join(s.cfg.Storage.Path, snapshotsDir)
	// A snapshot a crash interrupted left its temporary directory.
	if left, err := filepath.Glob(filepath.Join(root, ".*.tmp")); err == nil {
		for _, d := range left {
			if err := os.RemoveAll(d); err != nil {
				return "", fmt.Errorf("remove an unfinished snapshot: %w", err)
			}
		}
	}
	name := start.UTC().Format("20060102T150405Z0700") + "-" + strconv.FormatUint(rand.Uint64()|1<<63, 16)
	tmp := filepath.Join(root, "."+name+".tmp")
	if err := os.MkdirAll(tmp, 0o750); err != nil {
		return "", fmt.Errorf("create snapshot directory: %w", err)
	}
	var n snapshotCounts
	if err := s.snapshotInto(ctx, tmp, skipHead, &n); err != nil {
		return "", errors.Join(err, os.RemoveAll(tmp))
	}
	dir := filepath.Join(root, name)
	if err := os.Rename(tmp, dir); err != nil {
		return "", errors.Join(fmt.Errorf("complete snapshot: %w", err), os.RemoveAll(tmp))
	}
	if err := atomicfile.SyncDir(root); err != nil {
		return "", err
	}
	s.logger.Info("snapshot taken", "dir", dir, "raw_blocks", n.rawBlocks, "partitions", n.partitions,
		"partitions_gone", n.gone, "baseline_files", n.baselines, "case_archive", n.archive, "skip_head", skipHead,
		"duration", time.Since(start).Round(time.Millisecond))
	return name, nil
}

type snapshotCounts struct {
	rawBlocks, partitions, gone, baselines int
	archive                                bool
}

func (s *server) snapshotInto(ctx context.Context, dir string, skipHead bool, n *snapshotCounts) error {
	rawDst := filepath.Join(dir, "raw")
	if err := os.Mkdir(rawDst, 0o750); err != nil {
		return err
	}
	db := s.raw.DB()
	if !skipHead {
		// The TSDB's snapshot writes the in-order head only; what arrived
		// out of order within storage.out_of_order_time_window is written
		// as blocks first (what its next compaction would write).
		if err := db.CompactOOOHead(ctx); err != nil {
			return fmt.Errorf("snapshot: write the raw tier's out-of-order head: %w", err)
		}
	}
	if err := db.Snapshot(rawDst, !skipHead); err != nil {
		return fmt.Errorf("snapshot the raw tier: %w", err)
	}
	if ents, err := os.ReadDir(rawDst); err == nil {
		n.rawBlocks = len(ents)
	}
	for _, tier := range []*tiers.Rollup{s.minute, s.hour} {
		for _, p := range tier.Partitions() {
			ok, err := s.linkInto(dir, p.Path)
			if err != nil {
				return fmt.Errorf("snapshot partition: %w", err)
			}
			if ok {
				n.partitions++
			} else {
				n.gone++ // deleted by retention meanwhile, or only in the bucket
			}
		}
	}
	// The metadata file is replaced (renamed over), never changed in
	// place: saved now, it is linked as the partitions are.
	if err := s.meta.Save(); err != nil {
		return fmt.Errorf("snapshot metadata: %w", err)
	}
	if _, err := s.linkInto(dir, filepath.Join(s.cfg.Storage.Path, "metadata.json")); err != nil {
		return fmt.Errorf("snapshot metadata: %w", err)
	}
	if arc := s.arc.arc.Load(); arc != nil {
		if err := arc.BackupTo(filepath.Join(dir, archive.FileName)); err != nil {
			return err
		}
		n.archive = true
	}
	ents, err := os.ReadDir(baselineDir(s.cfg.Storage.Path))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("snapshot baseline checkpoints: %w", err)
	}
	for _, e := range ents {
		if !e.Type().IsRegular() || !strings.HasSuffix(e.Name(), ".sum") && !strings.HasSuffix(e.Name(), ".ckpt") {
			continue
		}
		ok, err := s.linkInto(dir, filepath.Join(baselineDir(s.cfg.Storage.Path), e.Name()))
		if err != nil {
			return fmt.Errorf("snapshot baseline checkpoints: %w", err)
		}
		if ok {
			n.baselines++
		}
	}
	return atomicfile.SyncDir(dir)
}

// linkInto hard-links path, a file under the storage path, to the same
// place under dir; false when the file no longer exists.
func (s *server) linkInto(dir, path string) (bool, error) {
	rel, err := filepath.Rel(s.cfg.Storage.Path, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return false, fmt.Errorf("%s is not under the storage path %s", path, s.cfg.Storage.Path)
	}
	dst := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(dst), 0o750); err != nil {
		return false, err
	}
	if err := os.Link(path, dst); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, err
	}
	return true, nil
}

// snapshotHandler serves Prometheus' POST (or PUT)
// /api/v1/admin/tsdb/snapshot?skip_head=<bool> with web.enable_admin_api
// on, answering as Prometheus does: {"status":"success","data":{"name":
// ...}}; without it 503 "admin APIs disabled".
func (s *server) snapshotHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost && r.Method != http.MethodPut {
			w.Header().Set("Allow", "POST, PUT")
			apiError(w, http.StatusMethodNotAllowed, "bad_data", errors.New("this endpoint requires a POST or PUT request"))
			return
		}
		if !s.cfg.Web.EnableAdminAPI {
			apiError(w, http.StatusServiceUnavailable, "unavailable", errAdminDisabled)
			return
		}
		skipHead := false
		if v := r.FormValue("skip_head"); v != "" {
			b, err := strconv.ParseBool(v)
			if err != nil {
				apiError(w, http.StatusBadRequest, "bad_data", fmt.Errorf("unable to parse boolean 'skip_head' argument: %w", err))
				return
			}
			skipHead = b
		}
		name, err := s.snapshot(r.Context(), skipHead)
		if err != nil {
			apiError(w, http.StatusInternalServerError, "internal", fmt.Errorf("create snapshot: %w", err))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]string{"name": name}})
	})
}

func apiError(w http.ResponseWriter, code int, typ string, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"status": "error", "errorType": typ, "error": err.Error()})
}
