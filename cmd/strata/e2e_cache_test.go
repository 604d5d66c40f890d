package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	remoteapi "github.com/prometheus/client_golang/exp/api/remote"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/prompb"
)

// TestResultsCacheEndToEnd: a server with the results cache and one
// without, fed the same samples, answer a refreshed panel alike, before and
// after a late sample; the cached one answers most steps from its cache,
// and its own background writes (self-scrape, canonical rules every second
// here) do not empty it.
func TestResultsCacheEndToEnd(t *testing.T) {
	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "strata.yml")
	if err := os.WriteFile(cfgFile, []byte("rules:\n  canonical_interval: 1s\nself_scrape:\n  interval: 1s\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cached := startStrata(t, filepath.Join(dir, "cached"), "--config.file="+cfgFile)
	plain := startStrata(t, filepath.Join(dir, "plain"), "--config.file="+cfgFile, "--query.results-cache-size=0")
	ctx := context.Background()

	now := time.Now().Truncate(time.Second)
	var series []testSeries
	for i := range 3 {
		s := testSeries{lbls: labels.FromStrings("__name__", "cache_e2e_total", "pod", "p"+strconv.Itoa(i)), typ: model.MetricTypeCounter}
		for ts := now.Add(-20 * time.Minute); !ts.After(now); ts = ts.Add(15 * time.Second) {
			s.samples = append(s.samples, prompb.Sample{Timestamp: ts.UnixMilli(), Value: float64(ts.Unix()%1000) * float64(i+1)})
		}
		series = append(series, s)
	}
	push := func(s []testSeries) {
		t.Helper()
		for _, p := range []*strataProc{cached, plain} {
			if _, err := newWriteClient(t, p, remoteapi.WriteV1MessageType).Store(ctx, encodeV1(t, s), 0); err != nil {
				t.Fatal(err)
			}
		}
	}
	push(series)

	const qs = "sum by (pod) (rate(cache_e2e_total[1m]))"
	ask := func(end time.Time) {
		t.Helper()
		end = end.Add(345678 * time.Nanosecond) // as Grafana's float seconds may be
		r := promv1.Range{Start: end.Add(-15 * time.Minute), End: end, Step: 15 * time.Second}
		var got [2]string
		for i, p := range []*strataProc{cached, plain} {
			v, _, _, err := newAPIClient(t, p).QueryRange(ctx, qs, r)
			if err != nil {
				t.Fatal(err)
			}
			got[i] = v.String()
		}
		if got[0] != got[1] {
			t.Errorf("range ending %s: the cached server answers\n%.500s\nthe other\n%.500s", end.Format(time.TimeOnly), got[0], got[1])
		}
	}
	ask(now)
	ask(now.Add(15 * time.Second)) // a refresh: the older steps from the cache
	// Two seconds and a half of both servers' own writes (rules and
	// self-scrape every second), then another refresh.
	time.Sleep(2500 * time.Millisecond)
	ask(now.Add(30 * time.Second))
	served := metricValue(t, cached, `strata_query_results_cache_steps_served_total`)
	partial := metricValue(t, cached, `strata_query_results_cache_lookups_total{result="partial"}`)
	if partial < 2 || served < 2*30 {
		t.Errorf("the cache served %v steps in %v partial lookups, want two refreshes' worth (about 40 steps each)", served, partial)
	}

	// A sample 10 minutes late, in a new series of the same metric: the
	// next answer must hold it.
	push([]testSeries{{
		lbls:    labels.FromStrings("__name__", "cache_e2e_total", "pod", "late"),
		samples: []prompb.Sample{{Timestamp: now.Add(-10 * time.Minute).UnixMilli(), Value: 1}, {Timestamp: now.Add(-595 * time.Second).UnixMilli(), Value: 6}, {Timestamp: now.Add(-590 * time.Second).UnixMilli(), Value: 11}},
		typ:     model.MetricTypeCounter,
	}})
	ask(now.Add(45 * time.Second))
	if !strings.Contains(queryRangeString(t, cached, qs, now.Add(45*time.Second)), `pod="late"`) {
		t.Error("the late series is not in the cached server's answer")
	}
	if got := metricValue(t, plain, `strata_query_results_cache_lookups_total{result="bypass"}`); got != -1 {
		t.Errorf("the server without a cache exposes a cache's lookups (%v bypasses)", got)
	}
}

func queryRangeString(t *testing.T, p *strataProc, qs string, end time.Time) string {
	t.Helper()
	v, _, _, err := newAPIClient(t, p).QueryRange(context.Background(), qs, promv1.Range{Start: end.Add(-15 * time.Minute), End: end, Step: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return v.String()
}

// metricValue returns the value of the sample of Strata's /metrics whose
// line starts with series (a name and its labels as exposed), or -1.
func metricValue(t *testing.T, p *strataProc, series string) float64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(p.get("/metrics"))
	if m == nil {
		return -1
	}
	v, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
