package httpapi

import (
	"encoding/json"
	"errors"
	"minimax-m3/portal"
	"net/http"
)

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// errorBody is every error response: a message, and for an invalid request the problems by key.
type errorBody struct {
	Error    string    `json:"error"`
	Problems []problem `json:"problems,omitempty"`
}

type problem struct {
	Key     string `json:"key"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, err error) {
	body := errorBody{Error: err.Error()}
	var invalid *portal.InvalidRequestError
	if errors.As(err, &invalid) {
		for _, p := range invalid.Problems {
			body.Problems = append(body.Problems, problem{Key: p.Key, Message: p.Message})
		}
	}
	writeJSON(w, status, body)
}

func statusOf(err error) int {
	var invalid *portal.InvalidRequestError
	switch {
	case errors.As(err, &invalid):
		return http.StatusBadRequest
	case errors.Is(err, portal.ErrBusy):
		return http.StatusConflict
	case errors.Is(err, portal.ErrAtCapacity):
		return http.StatusTooManyRequests
	case errors.Is(err, portal.ErrUnknownStack):
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
}
