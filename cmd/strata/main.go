package main

import (
	"fmt"
	"os"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/common/version"
)

func main() {
	app := kingpin.New("strata", "Strata: a tiered Prometheus remote-write store and PromQL API for AI inference fleets.")
	app.Version(version.Print("strata"))
	app.HelpFlag.Short('h')

	serve := newServeCommand(app)
	simulate := newSimulateCommand(app)
	bf := newBackfillCommand(app)
	bc := newBenchCommand(app)
	ex := newExportCommand(app)
	diag := newDiagnoseCommand(app)

	cmd, err := app.Parse(os.Args[1:])
	if err != nil {
		fmt.Fprintf(os.Stderr, "strata: %v\n", err)
		os.Exit(2)
	}
	var runErr error
	switch cmd {
	case serve.cmd.FullCommand():
		runErr = serve.run()
	case bf.cmd.FullCommand():
		runErr = bf.run(promslog.New(serve.logConfig))
	case bc.run.FullCommand(), bc.compare.FullCommand():
		runErr = bc.exec(cmd, promslog.New(serve.logConfig))
	case ex.cmd.FullCommand():
		runErr = ex.run(promslog.New(serve.logConfig))
	case diag.cmd.FullCommand():
		runErr = diag.run(promslog.New(serve.logConfig), os.Stdout)
	case simulate.cmd.FullCommand():
		runErr = simulate.run(promslog.New(serve.logConfig))
	}
	if runErr != nil {
		fmt.Fprintf(os.Stderr, "strata %s: %v\n", cmd, runErr)
		os.Exit(1)
	}
}
