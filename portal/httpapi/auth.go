package httpapi

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"
)

const (
	cookieName = "minimax-m3-portal"
	sessionTTL = 12 * time.Hour
)

// session is a signed-in browser's: whose, and until when.
type session struct {
	user  *User
	until time.Time
}

// newSession issues a session value for the page's cookie, for u.
func (s *Server) newSession(u *User) (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	id := hex.EncodeToString(b)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, ss := range s.sessions {
		if now.After(ss.until) {
			delete(s.sessions, k)
		}
	}
	// At most MaxSessions at once: a sign-in beyond it ends the session that would end first,
	// so repeated sign-ins cannot grow the server's memory without bound.
	for len(s.sessions) >= max(1, s.MaxSessions) {
		oldest := ""
		for k, ss := range s.sessions {
			if oldest == "" || ss.until.Before(s.sessions[oldest].until) {
				oldest = k
			}
		}
		delete(s.sessions, oldest)
	}
	s.sessions[id] = session{user: u, until: now.Add(sessionTTL)}
	return id, nil
}

// sessionUser is the user of a cookie value's live session, or nil.
func (s *Server) sessionUser(id string) *User {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.sessions[id]
	if !ok || !time.Now().Before(ss.until) {
		return nil
	}
	return ss.user
}

func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("token") {
			// Not even compared: a URL is kept in proxy logs, browser history and Referer headers.
			writeError(w, http.StatusBadRequest, errors.New("the token is never taken in a URL: sign in at "+s.at("/login")+", or send Authorization: Bearer"))
			return
		}
		if r.URL.Path == s.at("/login") {
			s.login(w, r)
			return
		}
		var user *User
		if s.Proxy != nil && s.Proxy.trusts(r.RemoteAddr) {
			// The proxy has authenticated the user; its header, not a token or a cookie, says who.
			// Exactly one value: a proxy that appends its header to the client's (instead of
			// replacing it) would otherwise let the client's come first.
			values := r.Header.Values(s.Proxy.Header)
			name := ""
			if len(values) == 1 {
				name = values[0]
			}
			if user = s.users.byName(name); user == nil {
				msg := "the proxy sent no " + s.Proxy.Header
				switch {
				case len(values) > 1:
					msg = fmt.Sprintf("the proxy sent %d values of %s: it must replace what a client sends, not add to it", len(values), s.Proxy.Header)
				case name != "":
					msg = fmt.Sprintf("%s %q is no user of this portal", s.Proxy.Header, name)
				}
				writeError(w, http.StatusUnauthorized, errors.New(msg))
				return
			}
			next.ServeHTTP(w, signIn(r, user))
			return
		}
		if got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			user = s.users.byToken(got)
		} else if c, err := r.Cookie(cookieName); err == nil {
			user = s.sessionUser(c.Value)
		}
		if user == nil {
			if r.Method == http.MethodGet && r.URL.Path == s.at("/") {
				http.Redirect(w, r, s.at("/login"), http.StatusSeeOther)
				return
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="minimax-m3"`)
			writeError(w, http.StatusUnauthorized, errors.New("a bearer token is required"))
			return
		}
		next.ServeHTTP(w, signIn(r, user))
	})
}

// loginPage is the sign-in form: the token goes in a POST body, never in a URL.
var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>minimax-m3 portal: sign in</title></head>
<body><form method="post" action="{{.Action}}">
<p><label>Portal token <input type="password" name="token" autocomplete="current-password" required autofocus></label>
<button type="submit">Sign in</button></p>
{{if .Error}}<p role="alert">{{.Error}}</p>{{end}}
</form></body></html>
`))

// login shows the sign-in form (GET) or takes the token from it (POST): a valid token buys a
// session, kept in a cookie that never holds the token.
func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	show := func(status int, msg string) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Content-Security-Policy", "default-src 'none'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'")
		w.WriteHeader(status)
		_ = loginPage.Execute(w, map[string]string{"Action": s.at("/login"), "Error": msg})
	}
	switch r.Method {
	case http.MethodGet:
		show(http.StatusOK, "")
		return
	case http.MethodPost:
	default:
		w.Header().Set("Allow", "GET, POST")
		writeError(w, http.StatusMethodNotAllowed, errors.New("sign in with GET (the form) or POST (the token)"))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
	user := s.users.byToken(r.PostFormValue("token"))
	if user == nil {
		show(http.StatusUnauthorized, "wrong token")
		return
	}
	signIn(r, user)
	id, err := s.newSession(user)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: id, Path: s.at("/"), HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: s.overTLS(r), MaxAge: int(sessionTTL.Seconds())})
	http.Redirect(w, r, s.at("/"), http.StatusSeeOther)
}

// overTLS says whether the browser reached the portal over TLS: served with it, behind a proxy that
// says so (X-Forwarded-Proto or Forwarded: proto=https; a false claim only makes the cookie
// stricter), or SecureCookies.
func (s *Server) overTLS(r *http.Request) bool {
	if r.TLS != nil || s.SecureCookies || strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https") {
		return true
	}
	for _, part := range strings.FieldsFunc(strings.ToLower(r.Header.Get("Forwarded")), func(c rune) bool { return c == ';' || c == ',' }) {
		if strings.TrimSpace(part) == "proto=https" {
			return true
		}
	}
	return false
}
