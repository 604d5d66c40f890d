package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// strataBinary is built once per test binary by TestMain; the end-to-end tests
// run it as a separate process, the way an operator does, so that signals,
// flags and kill -9 behave as in production.
var strataBinary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "strata-e2e-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	strataBinary = filepath.Join(dir, "strata")
	build := exec.Command("go", "build", "-o", strataBinary, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build strata:", err)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	if prometheusBuild.dir != "" {
		_ = os.RemoveAll(prometheusBuild.dir)
	}
	os.Exit(code)
}

// strataProc is a running `strata serve` started by a test.
type strataProc struct {
	t    testing.TB
	cmd  *exec.Cmd
	addr string // host:port it listens on
	// prefix is the route prefix its endpoints are under ("": the root)
	prefix string
	user   string // basic auth, if the server requires it
	pass   string
	// client and scheme reach it: http and the default client, unless
	// the server serves TLS (startStrataTLS)
	client *http.Client
	scheme string
	mu     sync.Mutex
	logs   strings.Builder
	done   chan struct{}
}

var startedRe = regexp.MustCompile(`msg="Strata started" address=(\S+) route_prefix=(\S+)`)

// startStrata runs `strata serve` on a loopback port chosen by the kernel with
// its data in dir, and waits until it is ready. The process is stopped with
// SIGTERM (and waited for) when the test ends, unless the test killed it.
func startStrata(t testing.TB, dir string, args ...string) *strataProc {
	t.Helper()
	return startStrataAuth(t, dir, "", "", args...)
}

// startStrataAuth is startStrata for a server that requires basic auth.
func startStrataAuth(t testing.TB, dir, user, pass string, args ...string) *strataProc {
	t.Helper()
	return startStrataTLS(t, dir, user, pass, nil, args...)
}

// startStrataTLS is startStrataAuth for a server that serves TLS: client
// trusts its certificate (nil: plain HTTP).
func startStrataTLS(t testing.TB, dir, user, pass string, client *http.Client, args ...string) *strataProc {
	t.Helper()
	all := append([]string{"serve", "--storage.path=" + dir, "--web.listen-address=127.0.0.1:0"}, args...)
	cmd := exec.Command(strataBinary, all...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &strataProc{t: t, cmd: cmd, done: make(chan struct{}), user: user, pass: pass, client: http.DefaultClient, scheme: "http"}
	if client != nil {
		p.client, p.scheme = client, "https"
	}
	addrc := make(chan string, 1)
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs.WriteString(line + "\n")
			p.mu.Unlock()
			if m := startedRe.FindStringSubmatch(line); m != nil {
				p.prefix = strings.TrimSuffix(m[2], "/")
				addrc <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	t.Cleanup(func() { p.stop() })
	select {
	case p.addr = <-addrc:
	case <-p.done:
		t.Fatalf("strata exited before it started:\n%s", p.output())
	case <-time.After(60 * time.Second):
		t.Fatalf("strata did not start within 60s:\n%s", p.output())
	}
	p.waitReady()
	return p
}

func (p *strataProc) url(path string) string { return p.scheme + "://" + p.addr + path }

// get returns the body of a GET of path on the server.
func (p *strataProc) get(path string) string {
	p.t.Helper()
	_, body := p.do(http.MethodGet, path, "", "")
	return body
}

// post POSTs body (contentType; "" for none) to path on the server and
// returns the status code and the body of the answer.
func (p *strataProc) post(path, contentType, body string) (int, string) {
	p.t.Helper()
	return p.do(http.MethodPost, path, contentType, body)
}

// do sends a request to path on the server and returns the status code and
// the body of the answer.
func (p *strataProc) do(method, path, contentType, body string) (int, string) {
	p.t.Helper()
	req, err := http.NewRequest(method, p.url(path), strings.NewReader(body)) //nolint:noctx // test client of a loopback server
	if err != nil {
		p.t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		p.t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func (p *strataProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

func (p *strataProc) waitReady() {
	p.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequest(http.MethodGet, p.url(p.prefix+"/-/ready"), nil)
		if p.user != "" {
			req.SetBasicAuth(p.user, p.pass)
		}
		resp, err := p.client.Do(req)
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.t.Fatalf("strata not ready within 30s:\n%s", p.output())
}

// stop sends SIGTERM and waits for a clean exit.
func (p *strataProc) stop() {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	p.wait(60 * time.Second)
	if !p.cmd.ProcessState.Success() {
		p.t.Errorf("strata exited with %v after SIGTERM:\n%s", p.cmd.ProcessState, p.output())
	}
}

// kill sends SIGKILL: no flush, no shutdown path.
func (p *strataProc) kill() {
	_ = p.cmd.Process.Kill()
	p.wait(30 * time.Second)
}

func (p *strataProc) wait(timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	// Wait closes the stderr pipe once the process has exited, and the
	// reader would lose what it had not read yet (the last lines, such
	// as "Strata stopped cleanly", under a loaded machine's scheduling):
	// let the reader reach the pipe's end first, which comes when the
	// process exits (or is killed below).
	waited := make(chan struct{})
	go func() { <-p.done; _ = p.cmd.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-ctx.Done():
		_ = p.cmd.Process.Kill()
		<-waited
		p.t.Errorf("strata did not exit within %s", timeout)
	}
	<-p.done
}
