package query

import (
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strconv"

	"github.com/grafana/regexp"
	"github.com/prometheus/prometheus/model/metadata"
)

// MetadataSource gives the metric metadata (type, help, unit) Strata has
// received by remote write. It is the consumer side of the remotewrite
// package's metadata store.
//
// Metadata returns, for each metric family name, the distinct metadata seen
// for it; metric "" asks for every family, otherwise only that family (an
// empty or nil map when it is unknown). The returned map and slices belong to
// the caller. Implementations must be safe for concurrent use.
type MetadataSource interface {
	Metadata(metric string) map[string][]metadata.Metadata
}

// metadataHandler serves /api/v1/metadata from a MetadataSource with the
// parameters and JSON of Prometheus' metricMetadata handler, which reads
// scrape targets instead.
func metadataHandler(source MetadataSource, cors *regexp.Regexp, logger *slog.Logger) http.Handler {
	return &getHandler{cors: cors, logger: logger, data: func(r *http.Request) (any, error) {
		limit, err := parseLimit(r, "limit")
		if err != nil {
			return nil, err
		}
		limitPerMetric, err := parseLimit(r, "limit_per_metric")
		if err != nil {
			return nil, err
		}
		return selectMetadata(source, r.FormValue("metric"), limit, limitPerMetric), nil
	}}
}

// parseLimit reads a limit parameter as Prometheus does: absent means -1 (no
// limit), and the error text is Prometheus'.
func parseLimit(r *http.Request, name string) (int, error) {
	s := r.FormValue(name)
	if s == "" {
		return -1, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, errors.New(name + " must be a number")
	}
	return n, nil
}

// selectMetadata applies Prometheus' semantics: duplicates collapse,
// limit_per_metric > 0 keeps at most that many entries per family, and limit
// >= 0 keeps at most that many families (so limit=0 gives {}), negative means
// no limit. Where Prometheus keeps an arbitrary subset (it walks Go maps),
// Strata keeps the families in name order and each family's entries in the
// source's order, so replies are reproducible.
func selectMetadata(src MetadataSource, metric string, limit, limitPerMetric int) map[string][]metadata.Metadata {
	res := map[string][]metadata.Metadata{}
	if src == nil {
		return res
	}
	all := src.Metadata(metric)
	names := make([]string, 0, len(all))
	for name := range all {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if limit >= 0 && len(res) >= limit {
			break
		}
		var kept []metadata.Metadata
		for _, m := range all[name] {
			if limitPerMetric > 0 && len(kept) >= limitPerMetric {
				break
			}
			if !slices.Contains(kept, m) {
				kept = append(kept, m)
			}
		}
		if len(kept) == 0 {
			// Prometheus lists a family only once it has an entry.
			continue
		}
		res[name] = kept
	}
	return res
}
