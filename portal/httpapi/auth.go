package httpapi

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"strings"
	"time"
)

const (
	cookieName = "minimax-m3-portal"
	sessionTTL = 12 * time.Hour
)

// newSession issues a session value for the page's cookie.
func (s *Server) newSession() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, until := range s.sessions {
		if now.After(until) {
			delete(s.sessions, k)
		}
	}
	s.sessions[id] = now.Add(sessionTTL)
	return id, nil
}

// session reports whether a cookie value is a live session.
func (s *Server) session(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	until, ok := s.sessions[id]
	return ok && time.Now().Before(until)
}

func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if t := r.URL.Query().Get("token"); t != "" && r.Method == http.MethodGet && r.URL.Path == s.at("/") {
			if !s.valid(t) {
				writeError(w, http.StatusUnauthorized, errors.New("wrong token"))
				return
			}
			id, err := s.newSession()
			if err != nil {
				writeError(w, http.StatusInternalServerError, err)
				return
			}
			http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: s.at("/"), HttpOnly: true, SameSite: http.SameSiteStrictMode,
				Secure: r.TLS != nil, MaxAge: int(sessionTTL.Seconds())})
			http.Redirect(w, r, s.at("/"), http.StatusSeeOther)
			return
		}
		authorized := false
		if got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			authorized = s.valid(got)
		} else if c, err := r.Cookie(cookieName); err == nil {
			authorized = s.session(c.Value)
		}
		if !authorized {
			w.Header().Set("WWW-Authenticate", `Bearer realm="minimax-m3"`)
			writeError(w, http.StatusUnauthorized, errors.New("a bearer token is required"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (s *Server) valid(t string) bool {
	return t != "" && subtle.ConstantTimeCompare([]byte(t), []byte(s.token)) == 1
}
