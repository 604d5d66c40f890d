package main

import (
	"fmt"
	"os"

	"github.com/alecthomas/kingpin/v2"
	"github.com/prometheus/common/version"
)

func main() {
	app := kingpin.New("strata", "Strata: a tiered Prometheus remote-write store and PromQL API for AI inference fleets.")
	app.Version(version.Print("strata"))
	app.HelpFlag.Short('h')
	if _, err := app.Parse(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
}
