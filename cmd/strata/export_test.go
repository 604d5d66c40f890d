package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/csv"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"golang.org/x/crypto/bcrypt"

	"github.com/strata-dev/strata/export"
	"github.com/strata-dev/strata/tiers"
)

// exportDay is the first day of the test history (a Monday).
var exportDay = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

// writeHourHistory writes two days of hour windows of GPU utilisation
// (two hosts) into dir's hour tier, as strata serve would have.
func writeHourHistory(t *testing.T, dir string) {
	t.Helper()
	hour, err := tiers.OpenRollup(tiers.DefaultHourConfig(filepath.Join(dir, "hour")), promslog.NewNopLogger(), prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hour.Close() }()
	for d := range 2 {
		start := exportDay.AddDate(0, 0, d).UnixMilli()
		var sws []tiers.SeriesWindows
		for h := range 2 {
			sw := tiers.SeriesWindows{Labels: labels.FromStrings("__name__", "DCGM_FI_DEV_GPU_UTIL", "Hostname", fmt.Sprintf("gpu-node-%d", h), "gpu", "0")}
			for i := range 24 {
				ws := start + int64(i)*time.Hour.Milliseconds()
				v := float64(10*h + i)
				sw.Windows = append(sw.Windows, tiers.Window{Start: ws, FirstT: ws, LastT: ws + 3_585_000, Count: 240,
					Sum: 240 * v, Min: v - 1, Max: v + 1, First: v, Last: v})
			}
			sws = append(sws, sw)
		}
		if err := hour.WritePartition(start, sws); err != nil {
			t.Fatal(err)
		}
	}
}

// runExportCmd runs the binary and returns its stdout, stderr and error.
func runExportCmd(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, strataBinary, args...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	return o.String(), e.String(), err
}

// TestExportCommand: strata export writes the table to a file or standard
// output, refuses to replace a file unless --force, says what is wrong with
// a request, and runs beside strata serve on the same directory without
// touching what serve is writing.
func TestExportCommand(t *testing.T) {
	dir := t.TempDir()
	writeHourHistory(t, dir)
	inProgress := filepath.Join(dir, "hour", ".tmp-42.parquet")
	if err := os.WriteFile(inProgress, []byte("a write in progress"), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "util.csv")
	args := []string{"export", "--storage.path=" + dir, "--from=2026-01-05", "--to=2026-01-07", "--step=1d", "--by=Hostname", "DCGM_FI_DEV_GPU_UTIL"}
	if _, stderr, err := runExportCmd(t, append(args, "--output="+out)...); err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(bytes.NewReader(b)).ReadAll()
	if err != nil || len(recs) != 1+2*2 {
		t.Fatalf("%d records (%v):\n%s", len(recs), err, b)
	}
	if recs[1][0] != "gpu-node-0" || recs[1][1] != "2026-01-05T00:00:00Z" || recs[1][3] != "hour" {
		t.Fatalf("first row %q", recs[1])
	}
	if _, err := os.Stat(inProgress); err != nil {
		t.Fatalf("export removed the writer's temporary file: %v", err)
	}
	_, stderr, err := runExportCmd(t, append(args, "--output="+out)...)
	if err == nil || !strings.Contains(stderr, "exists: give --force") {
		t.Fatalf("second run over an existing file: %v: %s", err, stderr)
	}
	if _, stderr, err := runExportCmd(t, append(args, "--output="+out, "--force", "--format=jsonl")...); err != nil {
		t.Fatalf("--force: %v: %s", err, stderr)
	}
	if b, _ := os.ReadFile(out); !bytes.HasPrefix(b, []byte(`{"Hostname":"gpu-node-0"`)) {
		t.Fatalf("--force did not replace the file: %.80s", b)
	}
	stdout, stderr, err := runExportCmd(t, append(args, "-o", "-")...)
	if err != nil || !strings.HasPrefix(stdout, "Hostname,step_start,step_end,tier,DCGM_FI_DEV_GPU_UTIL_series,") || strings.Contains(stderr, "[====") {
		t.Fatalf("stdout: %v\n%s\nstderr: %s", err, stdout, stderr)
	}
	_, stderr, err = runExportCmd(t, "export", "--storage.path="+dir, "--from=2026-01-05", "--to=2026-01-07", "--step=15m", "DCGM_FI_DEV_GPU_UTIL")
	if err == nil || !strings.Contains(stderr, "step 15m is finer than the hour tier") {
		t.Fatalf("a step finer than the tier: %v: %s", err, stderr)
	}

	// Beside a running server on the same data directory.
	p := startStrata(t, dir)
	pq := filepath.Join(t.TempDir(), "util.parquet")
	if _, stderr, err := runExportCmd(t, append(args, "--output="+pq)...); err != nil {
		t.Fatalf("export beside serve: %v: %s", err, stderr)
	}
	if b, err := os.ReadFile(pq); err != nil || !bytes.HasPrefix(b, []byte("PAR1")) {
		t.Fatalf("parquet output: %v %.4q", err, b)
	}
	p.stop()
}

// cancellingJob writes rows until its context is cancelled midway.
type cancellingJob struct{ cancel context.CancelFunc }

func (j cancellingJob) Columns() []export.Column {
	return []export.Column{{Name: "v", Type: export.ColFloat}}
}

func (j cancellingJob) Run(ctx context.Context, w export.RowWriter, _ func(int, int)) error {
	for i := range 100_000 {
		if i == 50_000 {
			j.cancel() // Ctrl-C
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := w.WriteRow([]export.Cell{{F: float64(i)}}); err != nil {
			return err
		}
	}
	return nil
}
func (cancellingJob) HasChart() bool             { return false }
func (cancellingJob) WriteChart(io.Writer) error { return nil }

// TestExportInterruptedLeavesNothing: an export cancelled halfway (Ctrl-C)
// leaves neither the output nor a temporary file.
func TestExportInterruptedLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := writeExport(ctx, cancellingJob{cancel}, export.FormatCSV, time.UTC, filepath.Join(dir, "out.csv"), io.Discard, nil)
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("err %v", err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 0 {
		t.Fatalf("left %v behind", entries)
	}
}

// selfSigned writes a certificate for 127.0.0.1 and its key into dir.
func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "strata-test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestExportAPIAuthTLS: GET /api/v1/export is served over TLS and needs
// the password like every endpoint, and answers the same table as the
// command.
func TestExportAPIAuthTLS(t *testing.T) {
	dir := t.TempDir()
	writeHourHistory(t, filepath.Join(dir, "data"))
	certFile, keyFile, pool := selfSigned(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	if err != nil {
		t.Fatal(err)
	}
	webCfg := filepath.Join(dir, "web.yml")
	cfg := fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  planner: %s\n", certFile, keyFile, hash)
	if err := os.WriteFile(webCfg, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}, Timeout: time.Minute}
	p := startStrataTLS(t, filepath.Join(dir, "data"), "planner", "s3cret", client, "--web.config.file="+webCfg)
	path := "/api/v1/export?query=DCGM_FI_DEV_GPU_UTIL&by=Hostname&step=1d&from=2026-01-05&to=2026-01-07&format=csv"
	get := func(user, pass string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, p.url(path), nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("", ""); code != http.StatusUnauthorized {
		t.Fatalf("without a password: %d", code)
	}
	if code, _ := get("planner", "wrong"); code != http.StatusUnauthorized {
		t.Fatalf("with a wrong password: %d", code)
	}
	code, body := get("planner", "s3cret")
	want, stderr, err := runExportCmd(t, "export", "--storage.path="+filepath.Join(dir, "data"), "--from=2026-01-05", "--to=2026-01-07", "--step=1d", "--by=Hostname", "DCGM_FI_DEV_GPU_UTIL")
	if err != nil {
		t.Fatalf("%v: %s", err, stderr)
	}
	if code != http.StatusOK || body != want {
		t.Fatalf("API %d:\n%s\ncommand:\n%s", code, body, want)
	}
	// Plain HTTP to the TLS port is refused.
	if resp, err := http.Get("http://" + p.addr + path); err == nil {
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("plain HTTP served the export")
		}
	} else if !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "malformed") && !strings.Contains(err.Error(), "reset") {
		t.Logf("plain HTTP: %v", err)
	}
}
