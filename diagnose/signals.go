package diagnose

import (
	"fmt"
	"time"

	"github.com/strata-dev/strata/dcgmbridge"
	"github.com/strata-dev/strata/dcgmbridge/rulegen"
)

// SignalsGroup is the name of the group that evaluates the canonical
// expressions at minute resolution.
const SignalsGroup = "strata_diagnose_signals"

// signalsYAML renders the catalogue's canonical recording rules at minute
// resolution: one evaluation a minute, rates over rateWindow (at least three
// windows). This is the package's only use of dcgmbridge, so a catalogue
// rename or split touches this file alone.
func signalsYAML(canonical rulegen.Config, rateWindow time.Duration) ([]byte, error) {
	canonical.GroupName = SignalsGroup
	canonical.Interval = time.Minute
	canonical.RateWindow = rateWindow
	cat, err := dcgmbridge.NewCatalogue()
	if err != nil {
		return nil, fmt.Errorf("render diagnosis signals: %w", err)
	}
	y, err := rulegen.YAML(cat, canonical)
	if err != nil {
		return nil, fmt.Errorf("render diagnosis signals: %w", err)
	}
	return y, nil
}

// DefaultSignals is the catalogue's default join and label configuration
// (rulegen.DefaultConfig): Replay's default, and what `strata serve`
// passes unless rules.canonical_join says otherwise.
func DefaultSignals() rulegen.Config { return rulegen.DefaultConfig() }
