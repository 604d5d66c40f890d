package main

import (
	"runtime/debug"
	"strings"

	"github.com/prometheus/common/version"
)

// setBuildVersion fills what `strata --version`, /api/v1/status/buildinfo
// and strata_build_info report. `make build` sets the variables of
// github.com/prometheus/common/version with -ldflags, as Prometheus' own
// build does; a binary built with plain `go build`, `go run` or `go install`
// gets them from the module and VCS information the Go toolchain embeds.
// Values set by -ldflags are kept.
func setBuildVersion() {
	bi, _ := debug.ReadBuildInfo() // nil when the binary carries none
	fillVersion(bi)
}

// fillVersion sets the empty variables of the version package from bi (nil:
// nothing is known): the module version (v1.2.3 from `go install ...@v1.2.3`,
// or a pseudo-version such as v0.0.0-20260101120000-abcdef123456+dirty from
// `go build` in a Git checkout; "devel" when Go knows none), the VCS revision
// with "-modified" for a dirty tree, and the commit time as the build date.
func fillVersion(bi *debug.BuildInfo) {
	settings := map[string]string{}
	if bi != nil {
		for _, s := range bi.Settings {
			settings[s.Key] = s.Value
		}
	}
	if version.Version == "" {
		v := ""
		if bi != nil {
			v = bi.Main.Version
		}
		if v == "" || v == "(devel)" {
			v = "devel"
		}
		version.Version = strings.TrimPrefix(v, "v")
	}
	if version.Revision == "" {
		// GetRevision reads vcs.revision and vcs.modified itself; it says
		// "unknown" when the binary carries no VCS information.
		version.Revision = version.GetRevision()
		if rev := settings["vcs.revision"]; rev != "" {
			version.Revision = rev
			if settings["vcs.modified"] == "true" {
				version.Revision += "-modified"
			}
		}
	}
	if version.BuildDate == "" {
		version.BuildDate = settings["vcs.time"]
	}
}
