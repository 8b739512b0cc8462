package httpapi

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"minimax-m3/manifest"
	"minimax-m3/portal"
)

// Server serves a portal.Manager over HTTP: JSON for the operations, server-sent events for progress, and
// one small page. Every request needs a user's bearer token (the page: once in its sign-in form at /login, then a
// cookie); a user sees and acts on only the stacks granted to them, and deploys only into their namespaces
// (403 otherwise, before anything runs).
//
//	GET  /api/stacks                       the stacks and what each runs
//	GET  /api/stacks/{stack}               outputs (404 for an unknown stack)
//	GET  /api/stacks/{stack}/history       updates, newest first
//	POST /api/stacks/{stack}/preview       body: {"base":"agg","config":{…},"hfToken":"…","plan":true}
//	POST /api/stacks/{stack}/up            body: the same (with "plan": the file a preview returned)
//	POST /api/stacks/{stack}/refresh
//	POST /api/stacks/{stack}/destroy
//	POST /api/stacks/{stack}/cancel
//	POST /api/stacks/{stack}/recover       clear stale locks and pending operations an earlier run left
//	GET  /api/stacks/{stack}/events        text/event-stream: the running (or last) operation's events
//
// Operations run in the background: the POST returns 202 once the operation started, 400 with the
// per-key problems for an invalid request, 409 when the stack is busy.
type Server struct {
	m     *portal.Manager
	users *Users
	mu    sync.Mutex
	ops   map[string]*opLog
	// sessions are the page's cookie values, each issued at a user's login with their token
	// and valid until its time: the cookie never holds the token itself.
	sessions map[string]session
	// Context bounds every operation the server starts (cancelled: they stop).
	ctx context.Context
	// streams counts the open event streams.
	streams int
	// interrupted are the stacks an earlier run left locked or with pending operations, until
	// recovered.
	interrupted map[string]portal.Interruption

	// MaxEvents is how many events an operation's log keeps (the oldest go first, and a stream
	// that missed them is told how many); MaxLogs how many stacks' last operations are kept (the
	// oldest finished one goes first); MaxStreams how many event streams may be open at once (one
	// more is refused, 429). NewServer sets defaults; change them before serving.
	MaxEvents, MaxLogs, MaxStreams int
	// MaxSessions is how many signed-in browsers are kept at once (a sign-in beyond it ends the
	// oldest session).
	MaxSessions int
	// BasePath serves everything under a path prefix ("/portal": the page at /portal/, the API
	// at /portal/api/…), for a reverse proxy that forwards that path unchanged; "" serves at /.
	// Set it before Handler.
	BasePath string
	// SecureCookies marks the session cookie Secure whatever the request says: for a portal
	// served behind a TLS-terminating proxy (it is Secure anyway over TLS, or when the proxy says
	// X-Forwarded-Proto: https).
	SecureCookies bool
	// AuditLog, if set, receives one JSON line (AuditRecord) per request that may change
	// something, per refusal of who asked (401, 403), and per operation's end. Set it before
	// serving.
	AuditLog io.Writer
	auditMu  sync.Mutex
	// Proxy, if set, takes the user of a request from the site's authenticating proxy (a header
	// naming a user of the users file) instead of a token. Set it before serving.
	Proxy *ProxyIdentity
	// running counts the operations' goroutines, until each has written its last event and its
	// audit record.
	running sync.WaitGroup
}

// Wait returns once every operation the server started has ended and written its audit record,
// or when ctx ends: call it after the Manager's Wait, before closing the audit log.
func (s *Server) Wait(ctx context.Context) error {
	done := make(chan struct{})
	go func() { s.running.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// CheckBasePath refuses a base path that is not "" or a clean absolute path without a trailing
// slash, of letters, digits, '.', '_', '-' and '/'.
func CheckBasePath(p string) error {
	if p == "" || (basePath.MatchString(p) && path.Clean(p) == p) {
		return nil
	}
	return fmt.Errorf("base path %q: a clean absolute path without a trailing slash (/portal), or empty", p)
}

var basePath = regexp.MustCompile(`^(/[A-Za-z0-9._-]+)+$`)

// The limits' defaults.
const (
	DefaultMaxEvents   = 10000
	DefaultMaxLogs     = 500
	DefaultMaxStreams  = 64
	DefaultMaxSessions = 10000
)

// NewServer serves m to one user, "admin", who holds token and may reach every stack.
func NewServer(ctx context.Context, m *portal.Manager, token string) (*Server, error) {
	users, err := SingleUser("admin", token)
	if err != nil {
		return nil, err
	}
	return NewServerForUsers(ctx, m, users), nil
}

// NewServerForUsers serves m to users, each with their own token and grants (LoadUsers).
func NewServerForUsers(ctx context.Context, m *portal.Manager, users *Users) *Server {
	return &Server{m: m, users: users, ops: map[string]*opLog{}, sessions: map[string]session{}, ctx: ctx,
		MaxEvents: DefaultMaxEvents, MaxLogs: DefaultMaxLogs, MaxStreams: DefaultMaxStreams, MaxSessions: DefaultMaxSessions}
}

// Handler is the server's routes. A state-changing request from another origin (a page on another
// port of the same host included: cookies ignore ports) is refused before authentication (Go's
// CrossOriginProtection: Sec-Fetch-Site, else Origin against Host); a {stack} that is not a stack
// name is refused before any handler reads it.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", bounded(s.page))
	mux.HandleFunc("GET /api/stacks", bounded(s.listStacks))
	mux.HandleFunc("GET /api/stacks/{stack}", bounded(s.withStack(s.outputs)))
	mux.HandleFunc("GET /api/stacks/{stack}/history", bounded(s.withStack(s.history)))
	mux.HandleFunc("GET /api/stacks/{stack}/events", s.withStack(s.events))
	mux.HandleFunc("POST /api/stacks/{stack}/{op}", bounded(s.withStack(s.operation)))
	var h http.Handler = mux
	if s.BasePath != "" {
		base := s.BasePath
		prefixed := http.NewServeMux()
		prefixed.Handle(base+"/", http.StripPrefix(base, mux))
		prefixed.Handle(base, http.RedirectHandler(base+"/", http.StatusMovedPermanently))
		h = prefixed
	}
	return securityHeaders(s.audited(http.NewCrossOriginProtection().Handler(s.auth(h))))
}

// checkAllowRoll refuses an allowRoll that names no component.
func checkAllowRoll(v string) error {
	if v == "" || v == "all" {
		return nil
	}
	for _, c := range strings.Split(v, ",") {
		if !slices.Contains([]string{"Frontend", "Worker", "PrefillWorker", "DecodeWorker", manifest.EndpointPickerName}, c) {
			return invalidAt("allowRoll", fmt.Sprintf("%q is not a component: Frontend, Worker, PrefillWorker, DecodeWorker, %s, comma-separated, or all", c, manifest.EndpointPickerName))
		}
	}
	return nil
}

// SetInterruptions shows what portal.Manager.Interruptions found (at start) on the page and in the stack
// list, until each stack is recovered.
func (s *Server) SetInterruptions(ins []portal.Interruption) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.interrupted = map[string]portal.Interruption{}
	for _, in := range ins {
		s.interrupted[in.Stack] = in
	}
}

func (s *Server) interruption(stack string) *portal.Interruption {
	s.mu.Lock()
	defer s.mu.Unlock()
	if in, ok := s.interrupted[stack]; ok {
		return &in
	}
	return nil
}

// at is a path of the portal's, under its base path.
func (s *Server) at(p string) string { return s.BasePath + p }

// securityHeaders are on every response: nothing is cached or sniffed, no referrer leaves the
// page, and no other site may frame it.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-store")
		h.Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}

// handlerDeadline bounds writing a response, except the event stream's (which lives as long as
// the operation it follows).
const handlerDeadline = 2 * time.Minute

// bounded sets the response's write deadline.
func bounded(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(handlerDeadline))
		h(w, r)
	}
}

// withStack refuses a request whose {stack} is not a stack name (400, the problem at "stack"), or
// a stack the user may not reach (403), before any handler reads it.
func (s *Server) withStack(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		stack := r.PathValue("stack")
		if err := portal.CheckStackName(stack); err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		if u := userOf(r.Context()); u == nil || !u.MayReach(stack) {
			writeError(w, http.StatusForbidden, fmt.Errorf("%s may not reach stack %s", nameOf(u), stack))
			return
		}
		h(w, r)
	}
}

// visible are the stacks of names the request's user may reach.
func visible(r *http.Request, names []string) []string {
	u := userOf(r.Context())
	var out []string
	for _, n := range names {
		if u != nil && u.MayReach(n) {
			out = append(out, n)
		}
	}
	return out
}

func nameOf(u *User) string {
	if u == nil {
		return "nobody"
	}
	return "user " + u.Name
}
