package main

import (
	"fmt"
	"os"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/common/version"
)

func main() {
	setBuildVersion()
	c := newCLI()
	cmd, err := c.app.Parse(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "strata: %v\n", err)
		os.Exit(2)
	}
	var runErr error
	switch cmd {
	case c.serve.cmd.FullCommand():
		runErr = c.serve.run()
	case c.backfill.cmd.FullCommand():
		runErr = c.backfill.run(promslog.New(c.serve.logConfig))
	case c.bench.run.FullCommand(), c.bench.compare.FullCommand(), c.bench.dashboard.FullCommand():
		runErr = c.bench.exec(cmd, promslog.New(c.serve.logConfig))
	case c.export.cmd.FullCommand():
		runErr = c.export.run(promslog.New(c.serve.logConfig))
	case c.diagnose.cmd.FullCommand(), c.diagX.list.FullCommand():
		runErr = c.diagnose.run(promslog.New(c.serve.logConfig), os.Stdout)
	case c.simulate.cmd.FullCommand():
		runErr = c.simulate.run(promslog.New(c.serve.logConfig))
	case c.check.config.FullCommand():
		runErr = c.check.run(os.Stdout)
	default:
		if c.diagX.handles(cmd) {
			runErr = c.diagX.run(cmd, promslog.New(c.serve.logConfig), os.Stdin, os.Stdout)
		}
	}
	if runErr != nil {
		fmt.Fprintf(os.Stderr, "strata %s: %v\n", cmd, runErr)
		os.Exit(1)
	}
}

// cli is strata's command line: the kingpin application and its commands,
// built in one place so tests see every flag a user can pass.
type cli struct {
	app      *kingpin.Application
	serve    *serveCommand
	simulate *simulateCommand
	backfill *backfillCommand
	bench    *benchCommand
	export   *exportCommand
	diagnose *diagnoseCommand
	check    *checkCommand
	// diagX are diagnose's subcommands: list (the default), bench, archive.
	diagX *diagnoseExtras
}

func newCLI() *cli {
	app := kingpin.New("strata", "Strata: a tiered Prometheus remote-write store and PromQL API for AI inference fleets.")
	app.Version(version.Print("strata"))
	app.HelpFlag.Short('h')
	c := &cli{
		app:      app,
		serve:    newServeCommand(app),
		simulate: newSimulateCommand(app),
		backfill: newBackfillCommand(app),
		bench:    newBenchCommand(app),
		export:   newExportCommand(app),
		diagnose: newDiagnoseCommand(app),
		check:    newCheckCommand(app),
	}
	c.diagX = newDiagnoseExtras(c.diagnose)
	return c
}
