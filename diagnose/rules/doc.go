// Package rules embeds the diagnosis engine's default rule pack: Prometheus
// rule files (promtool check rules passes on each) over Strata's canonical
// metrics, with a promtool unit test file beside each (*.test.yml). See
// docs/diagnosis.md for what each rule detects and how to add one.
package rules

import "embed"

// FS holds the rule files and their promtool tests.
//
//go:embed *.yml
var FS embed.FS
