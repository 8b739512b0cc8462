package httpapi

import (
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"minimax-m3/portal"
	"net/http"
)

// pageData is what the page shows.
type pageData struct {
	Stacks []pageStack
	// Nonce admits the page's own script and style under its Content-Security-Policy.
	Nonce string
	// Base is the portal's base path, which the page's requests start with.
	Base string
	// Error is why the stacks could not be listed (the page then shows those running here).
	Error string
}

type pageStack struct {
	Name        string
	Running     string
	Outputs     *portal.Outputs
	Error       string
	Interrupted *portal.Interruption
}

// page.html.tmpl is the page: one section per stack, and a script that follows each stack's event
// stream. Its script and style run under a per-response nonce (Content-Security-Policy).
//
//go:embed page.html.tmpl
var pageSource string

var pageTemplate = template.Must(template.New("page").Parse(pageSource))

func (s *Server) page(w http.ResponseWriter, r *http.Request) {
	names, err := s.m.Stacks(r.Context())
	listErr := ""
	if err != nil {
		// The page still shows what runs here, with the error (and 503, for a monitor): one
		// failed listing does not blank it for everyone watching an operation.
		names, listErr = s.m.RunningStacks(), "listing the stacks failed: "+err.Error()
	}
	nonce := make([]byte, 16)
	if _, err := rand.Read(nonce); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	data := pageData{Nonce: hex.EncodeToString(nonce), Base: s.BasePath, Error: listErr}
	for _, n := range visible(r, names) {
		ps := pageStack{Name: n, Running: s.m.Running(n), Interrupted: s.interruption(n)}
		out, err := s.m.Outputs(r.Context(), n)
		switch {
		case err == nil && out.GraphName != "": // a stack whose first update has not completed has none
			ps.Outputs = &out
		case err != nil && (ps.Running == "" || !errors.Is(err, portal.ErrUnknownStack)): // (one being created has no state yet)
			ps.Error = err.Error()
		}
		data.Stacks = append(data.Stacks, ps)
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", fmt.Sprintf("default-src 'none'; script-src 'nonce-%[1]s'; style-src 'nonce-%[1]s'; "+
		"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'", data.Nonce))
	if listErr != "" {
		w.WriteHeader(http.StatusServiceUnavailable)
	}
	_ = pageTemplate.Execute(w, data)
}
