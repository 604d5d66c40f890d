package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/model"

	"github.com/strata-dev/strata/diagnose"
	"github.com/strata-dev/strata/diagnose/archive"
	diagbench "github.com/strata-dev/strata/diagnose/bench"
)

// archiveSource serves POST /api/v1/diagnoses/{id}/feedback from the case
// archive once the diagnosis engine has opened it.
type archiveSource struct {
	arc     atomic.Pointer[archive.Archive]
	handler atomic.Pointer[http.Handler]
}

func (a *archiveSource) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := a.handler.Load()
	if h == nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"status":"error","errorType":"not_found","error":"no case archive: the diagnosis engine is off (diagnose.enabled)"}`+"\n")
		return
	}
	(*h).ServeHTTP(w, r)
}

// archive is the engine's hook: the case archive, or none.
func (a *archiveSource) archive() diagnose.Archive {
	if arc := a.arc.Load(); arc != nil {
		return arc
	}
	return nil
}

// openArchive opens the case archive in the data directory for the live
// engine and serves its feedback endpoint; startServer calls it before the
// server is ready when the engine is enabled.
func (s *server) openArchive(logger *slog.Logger) (*archive.Archive, error) {
	arc, err := archive.Open(filepath.Join(s.cfg.Storage.Path, archive.FileName), s.cfg.Diagnose.Archive,
		archive.Options{Logger: logger, Registerer: s.reg, SetAsideCorrupt: true})
	if err != nil {
		return nil, err
	}
	s.closer = append(s.closer, arc.Close)
	h := archive.NewFeedbackHandler(arc)
	s.arc.arc.Store(arc)
	s.arc.handler.Store(&h)
	return arc, nil
}

// diagnoseExtras are the subcommands of `strata diagnose` besides listing
// diagnoses: the benchmark and the case archive's export and import.
type diagnoseExtras struct {
	parent *diagnoseCommand
	// list is the default subcommand: `strata diagnose` alone lists.
	list *kingpin.CmdClause

	bench         *kingpin.CmdClause
	split         string
	out           string
	short         bool
	dataDir       string
	reuse         bool
	maxHistory    string
	priorArchive  string
	compareStatic bool

	export, imp *kingpin.CmdClause
	file        string
}

func newDiagnoseExtras(parent *diagnoseCommand) *diagnoseExtras {
	x := &diagnoseExtras{parent: parent}
	x.list = parent.cmd.Command("list", "List the diagnoses of a time range (the default).").Default()
	x.bench = parent.cmd.Command("bench", "Run the diagnosis benchmark: simulate the split's scenarios into fresh data directories, replay the engine, score it against the ground truth, and write report.md, report.json and PNG charts (docs/diagnosis-bench.md).")
	x.bench.Flag("split", "Which split: tuning, heldout, or both (tuning first; its archive with simulated verdicts then reranks the held-out diagnoses).").Default("both").EnumVar(&x.split, "tuning", "heldout", "both")
	x.bench.Flag("out", "Directory for the report.").Default("diagnose-bench").StringVar(&x.out)
	x.bench.Flag("short", "Run the splits' short (CI) scenarios.").BoolVar(&x.short)
	x.bench.Flag("data-dir", "Keep the generated data directories here (default: a temporary directory, removed).").StringVar(&x.dataDir)
	x.bench.Flag("max-history", "Shorten every scenario's fault-free history to at most this (a quick run; the report says so), e.g. 3d.").StringVar(&x.maxHistory)
	x.bench.Flag("prior-archive", "The case archive (diagnoses.db) of an earlier tuning run kept with --data-dir: the held-out split's diagnoses are reranked by it, as when both splits run.").StringVar(&x.priorArchive)
	x.bench.Flag("compare-static", "Replay every fault-free history a second time with static thresholds in place of the baselines and report both false-diagnosis rates (seasonal mode only).").Default("true").BoolVar(&x.compareStatic)
	x.bench.Flag("reuse", "With --data-dir: reuse a scenario's data directory from an earlier run of the same scenario (replay and score only).").BoolVar(&x.reuse)
	arc := parent.cmd.Command("archive", "Export or import the case archive (diagnoses.db in --storage.path) as JSON lines.")
	x.export = arc.Command("export", "Write every archived case as one JSON line (read-only: safe beside a running strata serve).")
	x.export.Flag("file", "Output file (default: standard output).").StringVar(&x.file)
	x.imp = arc.Command("import", "Add the cases of a JSON-lines export; cases and verdicts already held are not added again.")
	x.imp.Flag("file", "Input file (default: standard input).").StringVar(&x.file)
	return x
}

// handles reports whether cmd is one of the extras; list is the parent's.
func (x *diagnoseExtras) handles(cmd string) bool {
	return cmd == x.bench.FullCommand() || cmd == x.export.FullCommand() || cmd == x.imp.FullCommand()
}

func (x *diagnoseExtras) run(cmd string, logger *slog.Logger, stdin io.Reader, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch cmd {
	case x.bench.FullCommand():
		return x.runBench(ctx, logger, stdout)
	case x.export.FullCommand():
		return x.runExport(ctx, logger, stdout)
	default:
		return x.runImport(ctx, logger, stdin, stdout)
	}
}

func (x *diagnoseExtras) runBench(ctx context.Context, logger *slog.Logger, stdout io.Writer) error {
	cfg, err := loadConfig(x.parent.configFile)
	if err != nil {
		return err
	}
	if err := cfg.Diagnose.Validate(); err != nil {
		return err
	}
	var maxHistory time.Duration
	if x.maxHistory != "" {
		d, err := model.ParseDuration(x.maxHistory)
		if err != nil || d <= 0 {
			return fmt.Errorf("--max-history %q: want a positive duration such as 3d", x.maxHistory)
		}
		maxHistory = time.Duration(d)
	}
	splits := []string{diagbench.SplitTuning, diagbench.SplitHeldout}
	if x.split != "both" {
		splits = []string{x.split}
	}
	// The run allocates heavily and holds little: fewer collections save
	// about a fifth of its CPU time.
	debug.SetGCPercent(400)
	start := time.Now()
	r, err := diagbench.Run(ctx, diagbench.Options{Splits: splits, Short: x.short, DataDir: x.dataDir, Reuse: x.reuse, MaxHistory: maxHistory, PriorArchive: x.priorArchive, Engine: &cfg.Diagnose.Config, CompareStatic: x.compareStatic, Logger: logger})
	if err != nil {
		return err
	}
	paths, err := r.WriteFiles(x.out)
	if err != nil {
		return err
	}
	if err := r.WriteMarkdown(stdout); err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "\nWrote %v in %s.\n", paths, time.Since(start).Round(time.Second))
	return err
}

func (x *diagnoseExtras) archivePath() (string, error) {
	cfg, err := loadConfig(x.parent.configFile)
	if err != nil {
		return "", err
	}
	if x.parent.storagePath != "" {
		cfg.Storage.Path = x.parent.storagePath
	}
	return filepath.Join(cfg.Storage.Path, archive.FileName), nil
}

func (x *diagnoseExtras) runExport(ctx context.Context, logger *slog.Logger, stdout io.Writer) (err error) {
	path, err := x.archivePath()
	if err != nil {
		return err
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("no case archive: %w", err)
	}
	arc, err := archive.Open(path, archive.Config{}, archive.Options{ReadOnly: true, Logger: logger})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, arc.Close()) }()
	w := stdout
	if x.file != "" {
		f, err := os.Create(x.file)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, f.Close()) }()
		w = f
	}
	n, err := arc.Export(ctx, w)
	if err != nil {
		return err
	}
	logger.Info("exported the case archive", "cases", n, "from", path)
	return nil
}

func (x *diagnoseExtras) runImport(ctx context.Context, logger *slog.Logger, stdin io.Reader, stdout io.Writer) (err error) {
	path, err := x.archivePath()
	if err != nil {
		return err
	}
	cfg, err := loadConfig(x.parent.configFile)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	arc, err := archive.Open(path, cfg.Diagnose.Archive, archive.Options{Logger: logger})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, arc.Close()) }()
	r := stdin
	if x.file != "" {
		f, err := os.Open(x.file)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, f.Close()) }()
		r = f
	}
	res, err := arc.Import(ctx, r)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(stdout, "imported %d cases and %d verdicts into %s (%d cases already held, %d older than the retention)\n", res.Cases, res.Verdicts, path, res.Skipped, res.Expired)
	return err
}
