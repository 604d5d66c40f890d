package tiers

import (
	"encoding/json"
	"io/fs"
	"math"
	"net/http"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TierStatus is what one tier holds, for /api/v1/status/tiers.
type TierStatus struct {
	Tier       string `json:"tier"`
	Resolution string `json:"resolution"` // "raw" for the raw tier
	Retention  string `json:"retention"`
	Empty      bool   `json:"empty"`
	// MinTime and MaxTime bound the data held (ms since the epoch): for raw
	// the oldest and the newest sample (both inclusive), for rollups the
	// start of the oldest and the end (exclusive) of the newest partition.
	MinTime int64 `json:"minTime"`
	MaxTime int64 `json:"maxTime"`
	// ServesFrom/ServesUntil is the range the stitched view reads from this
	// tier by default (ms; absent when open-ended): [from, until).
	ServesFrom  *int64 `json:"servesFrom,omitempty"`
	ServesUntil *int64 `json:"servesUntil,omitempty"`
	// Partitions counts TSDB blocks (raw) or Parquet partition files.
	Partitions int   `json:"partitions"`
	Bytes      int64 `json:"bytes"`
	Rows       int64 `json:"rows,omitempty"`   // rollup windows stored
	Series     int64 `json:"series,omitempty"` // raw head series (cheap to know)
}

// Status describes every tier, finest first.
type Status struct {
	Tiers []TierStatus `json:"tiers"`
}

// Status reports what each tier holds. It reads no data files: rollup
// figures come from the partition list kept in memory, raw figures from the
// TSDB's block metadata and a walk of its directory.
func (s *Stitched) Status() Status {
	var st Status
	rawLo := s.rawStart()
	mLo, _, mOK := tierBounds(s.minute)
	if !mOK {
		mLo = rawLo
	}
	mLo = min(mLo, rawLo)
	if s.raw != nil {
		ts := TierStatus{Tier: TierRaw, Resolution: "raw", Retention: s.raw.cfg.Retention.String(), Empty: true}
		if mint, maxt, ok := s.raw.Bounds(); ok {
			ts.Empty = false
			ts.MinTime, ts.MaxTime = mint, maxt
			ts.ServesFrom = &rawLo
		}
		ts.Partitions = len(s.raw.db.Blocks())
		ts.Bytes = dirSize(s.raw.cfg.Dir)
		ts.Series = int64(s.raw.db.Head().NumSeries()) //nolint:gosec // a series count fits
		st.Tiers = append(st.Tiers, ts)
	}
	for _, t := range []struct {
		name     string
		r        *Rollup
		from, to int64
	}{{TierMinute, s.minute, mLo, rawLo}, {TierHour, s.hour, math.MinInt64, mLo}} {
		if t.r == nil {
			continue
		}
		ts := TierStatus{Tier: t.name, Resolution: t.r.cfg.Resolution.String(), Retention: t.r.cfg.Retention.String(), Empty: true}
		parts := t.r.Partitions()
		for _, p := range parts {
			ts.Bytes += p.Bytes
			ts.Rows += p.Rows
		}
		ts.Partitions = len(parts)
		if len(parts) > 0 {
			ts.Empty = false
			ts.MinTime, ts.MaxTime = parts[0].Start, parts[len(parts)-1].End
			if t.from != math.MinInt64 {
				ts.ServesFrom = &t.from
			}
			if t.to != math.MaxInt64 {
				ts.ServesUntil = &t.to
			}
		}
		st.Tiers = append(st.Tiers, ts)
	}
	return st
}

func dirSize(dir string) int64 {
	var n int64
	// Files may vanish during the walk (compaction, retention): skip them.
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil //nolint:nilerr // a partial size is better than none for a status figure
		}
		if d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// NewStatusHandler serves GET /api/v1/status/tiers: Status in the Prometheus
// API's {"status":"success","data":...} envelope.
func NewStatusHandler(s *Stitched) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			w.WriteHeader(http.StatusMethodNotAllowed)
			_ = json.NewEncoder(w).Encode(map[string]string{"status": "error", "errorType": "bad_data", "error": "method " + r.Method + " not allowed"})
			return
		}
		_ = json.NewEncoder(w).Encode(struct {
			Status string `json:"status"`
			Data   Status `json:"data"`
		}{"success", s.Status()})
	})
}

// RegisterMetrics registers the tier gauges, computed from Status at each
// scrape: strata_tier_bytes{tier}, strata_tier_oldest_timestamp_seconds{tier}
// and strata_tier_partitions{tier}.
func (s *Stitched) RegisterMetrics(reg prometheus.Registerer) error {
	return reg.Register(&tierCollector{
		s:          s,
		bytes:      prometheus.NewDesc("strata_tier_bytes", "Bytes on disk held by the tier.", []string{"tier"}, nil),
		oldest:     prometheus.NewDesc("strata_tier_oldest_timestamp_seconds", "Oldest time the tier holds data for (Unix seconds).", []string{"tier"}, nil),
		partitions: prometheus.NewDesc("strata_tier_partitions", "TSDB blocks (raw) or Parquet partition files (rollups) in the tier.", []string{"tier"}, nil),
	})
}

type tierCollector struct {
	s                         *Stitched
	bytes, oldest, partitions *prometheus.Desc
}

func (c *tierCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.bytes
	ch <- c.oldest
	ch <- c.partitions
}

func (c *tierCollector) Collect(ch chan<- prometheus.Metric) {
	for _, t := range c.s.Status().Tiers {
		ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(t.Bytes), t.Tier)
		ch <- prometheus.MustNewConstMetric(c.partitions, prometheus.GaugeValue, float64(t.Partitions), t.Tier)
		if !t.Empty {
			ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, float64(t.MinTime)/float64(time.Second/time.Millisecond), t.Tier)
		}
	}
}
