package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kingpin/v2"
)

// repoRoot is the repository, two levels above cmd/strata.
var repoRoot = filepath.Join("..", "..")

// cliFlags are the flags each strata command knows, as its --help lists them
// (hidden flags left out): the application's own, those of the command and
// of every command above it, and, for a command with a default subcommand
// (`strata bench` runs `bench run`), those of that subcommand. "" is the
// command `strata` runs without one (serve).
type cliFlags struct {
	byCommand map[string]map[string]bool
	any       map[string]bool // a flag of some command
}

func newCLIFlags() cliFlags {
	app := newCLI().app.Model()
	c := cliFlags{byCommand: map[string]map[string]bool{}, any: map[string]bool{}}
	add := func(set map[string]bool, flags []*kingpin.FlagModel) {
		for _, f := range flags {
			if f.Hidden {
				continue
			}
			set[f.Name] = true
			c.any[f.Name] = true
			if f.IsBoolFlag() {
				set["no-"+f.Name] = true
				c.any["no-"+f.Name] = true
			}
		}
	}
	var walk func(cmds []*kingpin.CmdModel, inherited []*kingpin.FlagModel)
	walk = func(cmds []*kingpin.CmdModel, inherited []*kingpin.FlagModel) {
		for _, cmd := range cmds {
			flags := append(slices.Clip(inherited), cmd.Flags...)
			set := map[string]bool{}
			add(set, flags)
			for _, sub := range cmd.Commands {
				if sub.Default {
					add(set, sub.Flags)
				}
			}
			c.byCommand[cmd.FullCommand] = set
			if cmd.Default && cmd.Depth == 1 {
				c.byCommand[""] = set
			}
			walk(cmd.Commands, flags)
		}
	}
	walk(app.Commands, app.Flags)
	return c
}

// command returns the longest strata command that words begin with ("" for
// none: strata's default command).
func (c cliFlags) command(words []string) string {
	cmd := ""
	for i := range words {
		next := strings.Join(words[:i+1], " ")
		if _, ok := c.byCommand[next]; !ok {
			break
		}
		cmd = next
	}
	return cmd
}

// known reports whether the command knows flag; "name*" stands for any flag
// with that prefix (the docs write --remote-write.max-* for a family).
func known(set map[string]bool, flag string) bool {
	if prefix, ok := strings.CutSuffix(flag, "*"); ok {
		for f := range set {
			if strings.HasPrefix(f, prefix) {
				return true
			}
		}
		return false
	}
	return set[flag]
}

// foreignFlags are flags of other programs that the docs mention, with a word
// that must appear in the same table row, list item or paragraph to say whose
// they are. A flag listed here is still checked wherever that word is absent.
var foreignFlags = map[string]string{
	"web.enable-remote-write-receiver": "prometheus",
	"web.enable-otlp-receiver":         "prometheus",
	"storage.tsdb.path":                "prometheus",
	"storage.tsdb.samples-per-chunk":   "prometheus",
	"storage.tsdb.min-block-duration":  "prometheus",
	"use-old-namespace":                "dcgm",
	"kv-cache-metrics":                 "vllm",
	"label-count":                      "avalanche",
	"data-urlencode":                   "curl",
	"max-num-seqs":                     "vllm",
	"gpu-memory-utilization":           "vllm",
	"query.replica-label":              "querier",
	"query.auto-downsampling":          "querier",
	"query.partial-response":           "querier",
	"endpoint":                         "querier",
	"http-address":                     "querier",
	"query.dynamic-lookback-delta":     "querier",
	"query.promql-engine":              "querier",
	"query.mode":                       "querier",
	"query.partition-label":            "querier",
}

// pendingDocFixes are documented flags that do not exist and that another
// change in flight removes from the docs, by "file --flag". The test fails
// when an entry no longer occurs, so that the list only ever empties.
var pendingDocFixes = map[string]string{}

var (
	flagRe = regexp.MustCompile(`(^|[^\w-])--([a-zA-Z0-9][a-zA-Z0-9._-]*\*?)`)
	// invocationRe finds `strata` run as a command (strata, ./strata,
	// "$work/strata") and the words after it.
	invocationRe = regexp.MustCompile(`(?:^|[\s/"'(])strata"?((?:\s+[a-z]+)*)(?:\s|$)`)
	codeSpanRe   = regexp.MustCompile("`[^`]+`")
	listItemRe   = regexp.MustCompile(`^\s*(?:[-*+]|\d+\.)\s`)
)

// docFlag is one --flag found in a file.
type docFlag struct {
	file string
	line int
	flag string
	cmd  *string // the strata command it is passed to, if the text runs one
	ctx  string  // the paragraph, list item or table row around it, lowercase
}

func (d docFlag) String() string { return fmt.Sprintf("%s:%d: --%s", d.file, d.line, d.flag) }

// flagsInSegment returns the flags of one command line or code span: those
// after a strata invocation are passed to that command.
func flagsInSegment(c cliFlags, seg string) (flags []string, cmds []*string) {
	inv := invocationRe.FindStringSubmatchIndex(seg)
	for _, m := range flagRe.FindAllStringSubmatchIndex(seg, -1) {
		var cmd *string
		if inv != nil && m[4] >= inv[1] {
			name := c.command(strings.Fields(seg[inv[2]:inv[3]]))
			cmd = &name
		}
		flags = append(flags, strings.TrimRight(seg[m[4]:m[5]], ".-"))
		cmds = append(cmds, cmd)
	}
	return flags, cmds
}

// markdownFlags finds every --flag of a markdown file: in code blocks and
// code spans that run strata, it belongs to that command; elsewhere to some
// strata command or, with its program named nearby, to another program.
func markdownFlags(c cliFlags, file, text string) []docFlag {
	lines := strings.Split(text, "\n")
	// Blocks: paragraphs, list items and table rows, for foreignFlags.
	blockOf := make([]int, len(lines))
	var blocks []string
	inFence := false
	startsBlock := func(i int) bool {
		if i == 0 {
			return true
		}
		l, prev := strings.TrimSpace(lines[i]), strings.TrimSpace(lines[i-1])
		return l == "" || prev == "" || strings.HasPrefix(l, "|") || strings.HasPrefix(prev, "|") ||
			strings.HasPrefix(l, "```") || listItemRe.MatchString(lines[i])
	}
	for i, l := range lines {
		fence := strings.HasPrefix(strings.TrimSpace(l), "```")
		if inFence || startsBlock(i) {
			blocks = append(blocks, "")
		}
		if fence {
			inFence = !inFence
		}
		blockOf[i] = len(blocks) - 1
		blocks[len(blocks)-1] += strings.ToLower(l) + "\n"
	}
	var out []docFlag
	inFence = false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inFence = !inFence
			continue
		}
		segs := []string{l}
		if !inFence {
			segs = append(codeSpanRe.FindAllString(l, -1), codeSpanRe.ReplaceAllString(l, " "))
		}
		for _, seg := range segs {
			flags, cmds := flagsInSegment(c, strings.Trim(seg, "`"))
			for j, f := range flags {
				out = append(out, docFlag{file: file, line: i + 1, flag: f, cmd: cmds[j], ctx: blocks[blockOf[i]]})
			}
		}
	}
	return out
}

// scriptFlags finds the flags a shell script passes to strata: those after
// a strata invocation on a command line (backslash continuations joined).
// Flags given to other programs (curl, prometheus, go) are not strata's.
func scriptFlags(c cliFlags, file, text string) []docFlag {
	var out []docFlag
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		start, cmdline := i, lines[i]
		for strings.HasSuffix(strings.TrimSpace(cmdline), `\`) && i+1 < len(lines) {
			i++
			cmdline = strings.TrimSuffix(strings.TrimSpace(cmdline), `\`) + " " + lines[i]
		}
		if strings.HasPrefix(strings.TrimSpace(cmdline), "#") {
			continue
		}
		flags, cmds := flagsInSegment(c, cmdline)
		for j, f := range flags {
			if cmds[j] != nil {
				out = append(out, docFlag{file: file, line: start + 1, flag: f, cmd: cmds[j]})
			}
		}
	}
	return out
}

// userFacingFiles are the files a user reads or runs: README.md, docs/**/*.md,
// scripts/*.sh and bench/run.sh.
func userFacingFiles(t *testing.T) (markdown, scripts []string) {
	t.Helper()
	markdown = []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(repoRoot, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(repoRoot, path)
			markdown = append(markdown, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := filepath.Glob(filepath.Join(repoRoot, "scripts", "*.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range append(sh, filepath.Join(repoRoot, "bench", "run.sh")) {
		rel, _ := filepath.Rel(repoRoot, s)
		scripts = append(scripts, rel)
	}
	return markdown, scripts
}

// TestDocumentedFlagsExist: every --flag that README.md, docs/ and the
// scripts tell a user to pass to strata is a flag of a strata command, and
// of the command the text runs it with. Flags of other programs are named
// with their program (foreignFlags).
func TestDocumentedFlagsExist(t *testing.T) {
	c := newCLIFlags()
	markdown, scripts := userFacingFiles(t)
	var found []docFlag
	for _, f := range markdown {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		found = append(found, markdownFlags(c, f, string(b))...)
	}
	for _, f := range scripts {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		found = append(found, scriptFlags(c, f, string(b))...)
	}
	if len(found) < 50 {
		t.Fatalf("found only %d flags in %v and %v: the scan is broken", len(found), markdown, scripts)
	}
	pending := map[string]bool{}
	for _, d := range found {
		if why, ok := pendingDocFixes[d.file+" --"+d.flag]; ok {
			pending[d.file+" --"+d.flag] = true
			t.Logf("%s: known, pending (%s)", d, why)
			continue
		}
		if d.cmd != nil {
			name := *d.cmd
			if name == "" {
				name = "serve (the default)"
			}
			if !known(c.byCommand[*d.cmd], d.flag) {
				t.Errorf("%s is passed to strata %s, which has no such flag (strata %s --help): wire the flag or fix the text", d, name, *d.cmd)
			}
			continue
		}
		if known(c.any, d.flag) {
			continue
		}
		if word, ok := foreignFlags[d.flag]; ok && strings.Contains(d.ctx, word) {
			continue
		}
		t.Errorf("%s is not a flag of any strata command (strata <command> --help): wire it, fix the text, or, if it is another program's, name the program next to it (foreignFlags in %s)", d, "cmd/strata/docs_test.go")
	}
	for k := range pendingDocFixes {
		if !pending[k] {
			t.Errorf("pendingDocFixes[%q]: the doc no longer mentions the flag; delete the entry", k)
		}
	}
}

// TestDocFlagScan checks the scan itself on examples, so that a change to it
// that stops finding flags cannot go unnoticed.
func TestDocFlagScan(t *testing.T) {
	c := newCLIFlags()
	md := "Run `strata simulate --push.url=x --fault=y` then `strata backfill --remote-read.url=u`.\n" +
		"| flag | x |\n|---|---|\n| `--storage.path` | `--remote-write.max-*` |\n\n" +
		"A Prometheus started with `--web.enable-remote-write-receiver`.\n\n" +
		"```sh\n./strata bench run --url=http://x --pid=1\nstrata --no-such-flag\n```\n" +
		"- an item naming `--label-count`\n"
	var got []string
	for _, d := range markdownFlags(c, "x.md", md) {
		cmd := "-"
		if d.cmd != nil {
			cmd = *d.cmd
		}
		got = append(got, fmt.Sprintf("%d %s %s", d.line, d.flag, cmd))
	}
	want := []string{
		"1 push.url simulate", "1 fault simulate", "1 remote-read.url backfill",
		"4 storage.path -", "4 remote-write.max-* -",
		"6 web.enable-remote-write-receiver -",
		"9 url bench run", "9 pid bench run", "10 no-such-flag ",
		"12 label-count -",
	}
	if !slices.Equal(got, want) {
		t.Errorf("markdown scan:\n got %q\nwant %q", got, want)
	}
	sh := "curl -fs --max-time 1 x\n\"$work/strata\" serve --storage.path=\"$d\" \\\n\t--web.enable-pprof >log &\n# ./strata --commented\n"
	got = nil
	for _, d := range scriptFlags(c, "x.sh", sh) {
		got = append(got, fmt.Sprintf("%d %s %s", d.line, d.flag, *d.cmd))
	}
	if want := []string{"2 storage.path serve", "2 web.enable-pprof serve"}; !slices.Equal(got, want) {
		t.Errorf("script scan:\n got %q\nwant %q", got, want)
	}
	if known(c.byCommand["serve"], "push.url") || !known(c.byCommand["bench"], "url") || !known(c.byCommand[""], "storage.path") {
		t.Error("command flag sets are wrong")
	}
}

// TestLongTestsListed: the README's table of long tests lists every test
// that skips itself under -short, and nothing else, so `make test-short`
// says truthfully what it leaves out.
func TestLongTestsListed(t *testing.T) {
	var long []string // "`pkg` `TestName`"
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != repoRoot || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		pkg, _ := filepath.Rel(repoRoot, filepath.Dir(path))
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || !strings.HasPrefix(fn.Name.Name, "Test") || fn.Body == nil {
				continue
			}
			ast.Inspect(fn.Body, func(n ast.Node) bool {
				if sel, ok := n.(*ast.SelectorExpr); ok && sel.Sel.Name == "Short" {
					if x, ok := sel.X.(*ast.Ident); ok && x.Name == "testing" {
						long = append(long, fmt.Sprintf("`%s` `%s`", filepath.ToSlash(pkg), fn.Name.Name))
						return false
					}
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	long = slices.Compact(long)
	if len(long) < 5 {
		t.Fatalf("found only %d long tests: the scan is broken", len(long))
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rowRe := regexp.MustCompile("(?m)^\\| (`[^`]+` `Test\\w+`) \\|")
	var listed []string
	for _, m := range rowRe.FindAllStringSubmatch(string(readme), -1) {
		listed = append(listed, m[1])
	}
	for _, l := range long {
		if !slices.Contains(listed, l) {
			t.Errorf("README.md's long-test table misses %s, which skips itself under -short", l)
		}
	}
	for _, l := range listed {
		if !slices.Contains(long, l) {
			t.Errorf("README.md's long-test table lists %s, which does not skip itself under -short (or no longer exists)", l)
		}
	}
}

// TestDocumentedMakeTargetsExist: every `make target` the README and docs/
// name is a target of the Makefile that `make help` lists, and the README's
// list of the other targets names each of them once.
func TestDocumentedMakeTargetsExist(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(repoRoot, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	targets := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^([a-zA-Z_-]+):.*## `).FindAllStringSubmatch(string(mk), -1) {
		targets[m[1]] = true
	}
	markdown, _ := userFacingFiles(t)
	useRe := regexp.MustCompile("`make ([a-z][a-z-]*)")
	for _, f := range markdown {
		b, err := os.ReadFile(filepath.Join(repoRoot, f))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range useRe.FindAllStringSubmatch(line, -1) {
				if !targets[m[1]] {
					t.Errorf("%s:%d: make %s is not a target of the Makefile", f, i+1, m[1])
				}
			}
		}
	}
	readme, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("`make help` lists the other targets \\(([^)]*)\\)").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md: no \"`make help` lists the other targets (...)\" sentence")
	}
	var listed []string
	for _, n := range regexp.MustCompile("`([a-z-]+)`").FindAllSubmatch(m[1], -1) {
		listed = append(listed, string(n[1]))
	}
	var want []string
	for tg := range targets {
		if tg != "help" && tg != "run" && tg != "test" { // the Quick start shows these
			want = append(want, tg)
		}
	}
	slices.Sort(want)
	got := slices.Clone(listed)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("README.md lists the other make targets as %v, the Makefile has %v", listed, want)
	}
}

// configRow is a row of docs/configuration.md's flag tables: the flag in
// backticks, then its default in backticks.
var configRow = regexp.MustCompile("(?m)^\\| `--([a-z0-9.-]+)` \\| `([^`]*)` \\|")

// TestConfigurationDefaults: every default docs/configuration.md's flag
// tables state is the default `strata serve` has (a default changed in the
// code and not in the reference, or the other way, fails).
func TestConfigurationDefaults(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "configuration.md"))
	if err != nil {
		t.Fatal(err)
	}
	app := newCLI().app.Model()
	defaults := map[string]string{}
	for _, f := range app.Flags {
		defaults[f.Name] = strings.Join(f.Default, ",")
	}
	for _, cmd := range app.Commands {
		if cmd.Name == "serve" {
			for _, f := range cmd.Flags {
				defaults[f.Name] = strings.Join(f.Default, ",")
			}
		}
	}
	rows := configRow.FindAllStringSubmatch(string(b), -1)
	if len(rows) < 6 {
		t.Fatalf("found %d flag rows with a default in docs/configuration.md, want at least the 6 of the runtime table: the scan is broken", len(rows))
	}
	for _, r := range rows {
		got, ok := defaults[r[1]]
		if !ok {
			t.Errorf("docs/configuration.md documents --%s, which strata serve does not have", r[1])
			continue
		}
		if got != r[2] {
			t.Errorf("docs/configuration.md gives --%s the default %q; strata serve's is %q", r[1], r[2], got)
		}
	}
}
