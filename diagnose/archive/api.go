package archive

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// maxFeedbackBody bounds a feedback request body.
const maxFeedbackBody = 64 << 10

type apiResponse struct {
	Status    string `json:"status"`
	Data      any    `json:"data,omitempty"`
	ErrorType string `json:"errorType,omitempty"`
	Error     string `json:"error,omitempty"`
}

func writeJSON(w http.ResponseWriter, code int, v apiResponse) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// FeedbackRequest is the body of POST /api/v1/diagnoses/{id}/feedback.
type FeedbackRequest struct {
	Verdict string `json:"verdict"`
	Cause   string `json:"cause"`
	Note    string `json:"note"`
}

// NewFeedbackHandler serves POST /api/v1/diagnoses/{id}/feedback
// (docs/api.md) in the Prometheus API's envelope: 200 with the case and its
// verdict history, 404 for an id the archive does not hold, 400 for a
// malformed body, an unknown verdict or an unknown cause, 413 for a body
// over 64 KiB.
func NewFeedbackHandler(a *Archive) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		body, err := io.ReadAll(io.LimitReader(r.Body, maxFeedbackBody+1))
		if err != nil {
			writeJSON(w, http.StatusBadRequest, apiResponse{Status: "error", ErrorType: "bad_data", Error: "read body: " + err.Error()})
			return
		}
		if len(body) > maxFeedbackBody {
			writeJSON(w, http.StatusRequestEntityTooLarge, apiResponse{Status: "error", ErrorType: "bad_data", Error: fmt.Sprintf("body larger than %d bytes", maxFeedbackBody)})
			return
		}
		var req FeedbackRequest
		dec := json.NewDecoder(strings.NewReader(string(body)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			writeJSON(w, http.StatusBadRequest, apiResponse{Status: "error", ErrorType: "bad_data",
				Error: `body must be JSON {"verdict": "confirmed"|"rejected"|"relabelled", "cause": "...", "note": "..."}: ` + err.Error()})
			return
		}
		c, err := a.Feedback(r.Context(), id, Verdict{Verdict: req.Verdict, Cause: req.Cause, Note: req.Note})
		switch {
		case errors.Is(err, ErrNotFound):
			writeJSON(w, http.StatusNotFound, apiResponse{Status: "error", ErrorType: "not_found", Error: "no diagnosis " + id + " in the case archive"})
		case errors.Is(err, ErrInvalidFeedback):
			writeJSON(w, http.StatusBadRequest, apiResponse{Status: "error", ErrorType: "bad_data", Error: err.Error()})
		case err != nil:
			writeJSON(w, http.StatusInternalServerError, apiResponse{Status: "error", ErrorType: "internal", Error: err.Error()})
		default:
			writeJSON(w, http.StatusOK, apiResponse{Status: "success", Data: c})
		}
	})
}
