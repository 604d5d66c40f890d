package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// prometheusBuild is the Prometheus binary built once per test binary from
// the github.com/prometheus/prometheus module go.mod requires (a `tool`
// there, so the build needs no other module than those go.sum pins).
var prometheusBuild struct {
	once sync.Once
	dir  string // removed by TestMain
	path string
	err  error
}

// prometheusBinary builds Prometheus on first use and returns its path. A
// failed build fails the test: the test exists to run a real Prometheus.
func prometheusBinary(t *testing.T) string {
	t.Helper()
	b := &prometheusBuild
	b.once.Do(func() {
		b.dir, b.err = os.MkdirTemp("", "strata-e2e-prometheus")
		if b.err != nil {
			return
		}
		b.path = filepath.Join(b.dir, "prometheus")
		// remove_all_sd leaves out the cloud service discoveries (static and
		// file discovery stay): a third of the build time, none of the test.
		cmd := exec.Command("go", "build", "-tags", "remove_all_sd", "-o", b.path, "github.com/prometheus/prometheus/cmd/prometheus")
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build prometheus: %w\n%s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

// TestPrometheusRemoteWrite: a real Prometheus scrapes itself every second
// and remote-writes to strata serve, once over RW 1.0 and once over RW 2.0.
// Its own counters must show every sample, histogram, exemplar and metadata
// entry sent and none failed or retried, and the samples must be queryable
// in Strata. (Strata once answered a successful RW 1.0 request with
// X-Prometheus-Remote-Write-Samples-Written: 0, which Prometheus 3 trusts: it
// counted every sample as failed.)
func TestPrometheusRemoteWrite(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs Prometheus: skipped under -short")
	}
	prom := prometheusBinary(t)
	for _, tc := range []struct{ name, message string }{
		{"rw1", "prometheus.WriteRequest"},
		{"rw2", "io.prometheus.write.v2.Request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startStrata(t, t.TempDir())
			p := startPrometheus(t, prom, s.url("/api/v1/write"), tc.message)

			// Bounded wait: three scrapes of Prometheus stored in Strata,
			// each sent in its own request (batch_send_deadline is 1 s).
			client := newAPIClient(t, s)
			deadline := time.Now().Add(90 * time.Second)
			for {
				v, _, _, err := client.Query(context.Background(), `count_over_time(up{job="prometheus"}[5m])`, time.Now())
				if vec, ok := v.(model.Vector); err == nil && ok && len(vec) == 1 && vec[0].Value >= 3 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Strata did not receive 3 scrapes of Prometheus within 90s (last query: %v, %v)\nPrometheus log:\n%s", v, err, p.output())
				}
				time.Sleep(200 * time.Millisecond)
			}

			sent := p.remoteStorageCounters(t)
			if sent["samples_total"] == 0 {
				t.Errorf("prometheus_remote_storage_samples_total = 0: nothing was sent")
			}
			for name, v := range sent {
				if v != 0 && (strings.HasSuffix(name, "_failed_total") || strings.HasSuffix(name, "_retried_total") || strings.HasSuffix(name, "_dropped_total")) {
					t.Errorf("prometheus_remote_storage_%s = %g, want 0", name, v)
				}
			}
			if t.Failed() {
				t.Logf("counters: %v\nPrometheus log:\n%s", sent, p.output())
			}

			// Every series of a scrape arrived, not only up.
			v, _, _, err := client.Query(context.Background(), `count({job="prometheus", __name__=~"prometheus_remote_storage_.+"})`, time.Now())
			if vec, ok := v.(model.Vector); err != nil || !ok || len(vec) != 1 || vec[0].Value < 10 {
				t.Errorf("Prometheus' remote-storage series in Strata: %v, %v; want at least 10", v, err)
			}
		})
	}
}

// promProc is a Prometheus started by a test.
type promProc struct {
	cmd  *exec.Cmd
	addr string
	mu   sync.Mutex
	logs strings.Builder
}

func (p *promProc) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.Write(b)
}

func (p *promProc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

// startPrometheus runs Prometheus on a free loopback port, scraping its own
// /metrics every second and remote-writing to writeURL with the given
// protobuf message, and waits until it is ready. It is stopped with SIGTERM
// when the test ends.
func startPrometheus(t *testing.T, bin, writeURL, message string) *promProc {
	t.Helper()
	dir := t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
scrape_configs:
  - job_name: prometheus
    static_configs: [{targets: [%q]}]
remote_write:
  - url: %s
    protobuf_message: %s
    queue_config: {batch_send_deadline: 1s, min_backoff: 100ms, max_backoff: 1s}
    metadata_config: {send_interval: 1s}
`, addr, writeURL, message)
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p := &promProc{addr: addr}
	p.cmd = exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=info")
	p.cmd.Stdout, p.cmd.Stderr = p, p
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-exited
			t.Errorf("prometheus did not stop within 30s after SIGTERM")
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
		select {
		case <-exited:
			t.Fatalf("prometheus exited before it was ready:\n%s", p.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus not ready within 60s:\n%s", p.output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// remoteStorageCounters reads Prometheus' prometheus_remote_storage_*_total
// counters, summed over remote-write queues, by name without the prefix.
func (p *promProc) remoteStorageCounters(t *testing.T) map[string]float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse Prometheus /metrics: %v", err)
	}
	const prefix = "prometheus_remote_storage_"
	out := map[string]float64{}
	for name, mf := range families {
		if !strings.HasPrefix(name, prefix) || mf.GetType().String() != "COUNTER" {
			continue
		}
		var sum float64
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue()
		}
		out[strings.TrimPrefix(name, prefix)] = sum
	}
	return out
}
