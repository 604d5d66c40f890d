package sim

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestGenerateFaults(t *testing.T) {
	cfg := Config{Nodes: 2, GPUsPerNode: 4}
	from := cfg.Defaults().Start
	to := from.Add(7 * 24 * time.Hour)
	a := GenerateFaults(cfg, from, to, 50, 1)
	if !reflect.DeepEqual(a, GenerateFaults(cfg, from, to, 50, 1)) {
		t.Fatal("same seed gave different faults")
	}
	if reflect.DeepEqual(a, GenerateFaults(cfg, from, to, 50, 2)) {
		t.Fatal("different seeds gave the same faults")
	}
	if len(a) != 50 {
		t.Fatalf("%d faults", len(a))
	}
	cfg.Faults = a
	c, err := New(cfg)
	if err != nil {
		t.Fatalf("generated faults do not validate: %v", err)
	}
	seen := map[Kind]bool{}
	for _, f := range c.GroundTruth() {
		seen[f.Kind] = true
		if f.Start.Before(from) || f.End.After(to) {
			t.Errorf("%s outside the range: %s..%s", f.Kind, f.Start, f.End)
		}
	}
	if len(seen) < 8 {
		t.Errorf("only %d kinds in 50 draws", len(seen))
	}
}

func TestServeOnLoopback(t *testing.T) {
	c := mustNew(t, Config{Nodes: 1, GPUsPerNode: 1, Seed: 4})
	// Listening first, the endpoints answer as soon as Serve runs: no retry.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	clock := c.Config().Start.Add(10 * time.Minute)
	done := make(chan error, 1)
	go func() { done <- c.ServeListener(ctx, ln, func() time.Time { return clock }) }()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + addr + "/gpu-node-0/dcgm/metrics")
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	body := string(b)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("serve: %v", err)
	}
	if !strings.Contains(body, "DCGM_FI_DEV_GPU_UTIL{") {
		t.Fatalf("no DCGM exposition served: %.200s", body)
	}
}

// TestGroundTruthPodAfterDeploy checks that a fault after a deploy names the
// new pod, the one the series carry at the fault's onset.
func TestGroundTruthPodAfterDeploy(t *testing.T) {
	c := mustNew(t, Config{Nodes: 1, GPUsPerNode: 2, Seed: 8, Faults: []FaultSpec{
		{Kind: KindSpecDecodeDrift, Node: 0, GPU: intp(1), At: 10 * time.Minute, Duration: 5 * time.Minute},
		{Kind: KindDeploy, Node: 0, GPU: intp(1), At: 5 * time.Minute},
	}})
	gt := c.GroundTruth()
	if gt[0].Kind != KindDeploy || gt[1].Target.Pod == gt[0].Target.Pod {
		t.Fatalf("drift after deploy names the replaced pod: %+v", gt)
	}
	before := string(scrape(t, c, dcgmPath))
	if !strings.Contains(before, `pod="`+gt[0].Target.Pod+`"`) {
		t.Errorf("deploy record's pod %s is not the pod serving before it", gt[0].Target.Pod)
	}
	c.Step(at(c, 11*time.Minute))
	if got := string(scrape(t, c, dcgmPath)); !strings.Contains(got, `pod="`+gt[1].Target.Pod+`"`) {
		t.Errorf("drift record's pod %s is not in the DCGM attribution", gt[1].Target.Pod)
	}
}

// TestConcurrentScrapeAndStep scrapes every handler from several goroutines
// while the model steps; run with -race it checks the locking.
func TestConcurrentScrapeAndStep(t *testing.T) {
	c := mustNew(t, Config{Nodes: 1, GPUsPerNode: 2, Seed: 6})
	hs := c.Handlers(nil)
	done := make(chan struct{})
	errs := make(chan string, 8) // each goroutine sends at most an error and its exit
	for range 4 {
		go func() {
			defer func() { errs <- "" }()
			for i := 0; i < 200; i++ {
				select {
				case <-done:
					return
				default:
				}
				for p, h := range hs {
					rec := httptest.NewRecorder()
					h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p, nil))
					if rec.Code != http.StatusOK {
						errs <- p + ": " + rec.Result().Status
						return
					}
				}
			}
		}()
	}
	for m := 1; m <= 30; m++ {
		c.Step(at(c, time.Duration(m)*time.Minute))
	}
	close(done)
	for range 4 {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
}
