package query

import (
	"log/slog"
	"net/http"

	"github.com/grafana/regexp"
	"github.com/prometheus/prometheus/util/httputil"
	v1 "github.com/prometheus/prometheus/web/api/v1"
)

// configData is the reply of /api/v1/status/config, Prometheus'
// prometheusConfig: the configuration as one YAML document.
type configData struct {
	YAML string `json:"yaml"`
}

// statusConfigHandler serves /api/v1/status/config with Strata's own
// configuration (Config.ConfigYAML). Prometheus' handler serializes a
// Prometheus config.Config, which Strata does not have.
func statusConfigHandler(yaml string, cors *regexp.Regexp, logger *slog.Logger) http.Handler {
	return &getHandler{cors: cors, logger: logger, data: func(*http.Request) (any, error) {
		return configData{YAML: yaml}, nil
	}}
}

// getHandler answers a GET route of the API the way Prometheus' router and
// its respond do for the routes Strata serves itself: CORS headers, 204 for
// the CORS preflight, 405 in plain text for other methods, and data in the
// {"status":"success","data":...} envelope. An error from data is the
// client's: 400 bad_data.
type getHandler struct {
	cors   *regexp.Regexp
	logger *slog.Logger
	data   func(*http.Request) (any, error)
}

func (h *getHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	httputil.SetCORS(w, h.cors, r)
	if r.Method == http.MethodOptions {
		// CORS preflight, answered as Prometheus' OPTIONS route does.
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if r.Method != http.MethodGet {
		// Prometheus registers these routes for GET only; its router answers
		// other methods 405 in plain text.
		w.Header().Set("Allow", http.MethodGet)
		http.Error(w, http.StatusText(http.StatusMethodNotAllowed), http.StatusMethodNotAllowed)
		return
	}
	data, err := h.data(r)
	if err != nil {
		writeError(w, h.logger, http.StatusBadRequest, "bad_data", err.Error())
		return
	}
	b, err := v1.JSONCodec{}.Encode(&v1.Response{Status: "success", Data: data})
	if err != nil {
		writeError(w, h.logger, http.StatusInternalServerError, "internal", err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	if _, err := w.Write(b); err != nil {
		h.logger.Debug("write response", "path", r.URL.Path, "err", err)
	}
}
