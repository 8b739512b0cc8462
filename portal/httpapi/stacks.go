package httpapi

import (
	"minimax-m3/portal"
	"net/http"
)

// StackInfo is one stack in the list.
type StackInfo struct {
	Name    string `json:"name"`
	Running string `json:"running,omitempty"`
	// Interrupted is what an earlier run left on the stack: POST …/recover clears it.
	Interrupted *portal.Interruption `json:"interrupted,omitempty"`
}

func (s *Server) listStacks(w http.ResponseWriter, r *http.Request) {
	names, err := s.m.Stacks(r.Context())
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	out := []StackInfo{}
	for _, n := range visible(r, names) {
		out = append(out, StackInfo{Name: n, Running: s.m.Running(n), Interrupted: s.interruption(n)})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) outputs(w http.ResponseWriter, r *http.Request) {
	out, err := s.m.Outputs(r.Context(), r.PathValue("stack"))
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) history(w http.ResponseWriter, r *http.Request) {
	out, err := s.m.History(r.Context(), r.PathValue("stack"), 20, 1)
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
