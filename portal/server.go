package portal

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io"
	"mime"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"minimax-m3/config"
)

// Server serves a Manager over HTTP: JSON for the operations, server-sent events for progress, and
// one small page. Every request needs the bearer token (the page: once as ?token=, then a cookie).
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
	m     *Manager
	token string
	mu    sync.Mutex
	ops   map[string]*opLog
	// sessions are the page's cookie values, each issued at a login with the token and valid
	// until its time: the cookie never holds the token itself.
	sessions map[string]time.Time
	// Context bounds every operation the server starts (cancelled: they stop).
	ctx context.Context
	// streams counts the open event streams.
	streams int
	// interrupted are the stacks an earlier run left locked or with pending operations, until
	// recovered.
	interrupted map[string]Interruption

	// MaxEvents is how many events an operation's log keeps (the oldest go first, and a stream
	// that missed them is told how many); MaxLogs how many stacks' last operations are kept (the
	// oldest finished one goes first); MaxStreams how many event streams may be open at once (one
	// more is refused, 429). NewServer sets defaults; change them before serving.
	MaxEvents, MaxLogs, MaxStreams int
	// BasePath serves everything under a path prefix ("/portal": the page at /portal/, the API
	// at /portal/api/…), for a reverse proxy that forwards that path unchanged; "" serves at /.
	// Set it before Handler.
	BasePath string
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
	DefaultMaxEvents  = 10000
	DefaultMaxLogs    = 500
	DefaultMaxStreams = 64
)

// NewServer serves m; token is the bearer token every request must carry.
func NewServer(ctx context.Context, m *Manager, token string) (*Server, error) {
	if len(token) < 16 {
		return nil, errors.New("the bearer token must have at least 16 characters")
	}
	return &Server{m: m, token: token, ops: map[string]*opLog{}, sessions: map[string]time.Time{}, ctx: ctx,
		MaxEvents: DefaultMaxEvents, MaxLogs: DefaultMaxLogs, MaxStreams: DefaultMaxStreams}, nil
}

// opLog is one operation's events, kept for the page and for late subscribers: at most max, the
// oldest dropped first.
type opLog struct {
	mu      sync.Mutex
	Op      string
	Started time.Time
	// Events are the kept events; first is the index (counting every event) of Events[0].
	Events []Event
	first  int
	max    int
	Done   bool
	Err    string
	notify chan struct{}
}

func newOpLog(op string, max int) *opLog {
	return &opLog{Op: op, Started: time.Now(), max: max, notify: make(chan struct{})}
}

func (l *opLog) add(e Event) {
	l.mu.Lock()
	l.Events = append(l.Events, e)
	if l.max > 0 && len(l.Events) > l.max {
		drop := len(l.Events) - l.max
		l.Events = append(l.Events[:0:0], l.Events[drop:]...)
		l.first += drop
	}
	close(l.notify)
	l.notify = make(chan struct{})
	l.mu.Unlock()
}

func (l *opLog) finish(err error) {
	l.mu.Lock()
	l.Done = true
	if err != nil {
		l.Err = err.Error()
	}
	close(l.notify)
	l.notify = make(chan struct{})
	l.mu.Unlock()
}

// since returns the events from index i on (an event saying how many were dropped first, when
// some before them are no longer kept), the index to read from next, whether the operation is
// done, and a channel closed at the next change.
func (l *opLog) since(i int) ([]Event, int, bool, string, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Event
	if i < l.first {
		out = append(out, Event{Time: time.Now(), Status: "dropped", Message: fmt.Sprintf("%d earlier events of this operation are no longer kept", l.first-i)})
		i = l.first
	}
	if k := i - l.first; k < len(l.Events) {
		out = append(out, l.Events[k:]...)
	}
	return out, l.first + len(l.Events), l.Done, l.Err, l.notify
}

// publish makes log the stack's last operation, dropping the oldest finished logs beyond MaxLogs.
func (s *Server) publish(stack string, log *opLog) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ops[stack] = log
	for len(s.ops) > s.MaxLogs && s.MaxLogs > 0 {
		oldest := ""
		for name, l := range s.ops {
			l.mu.Lock()
			done := l.Done
			l.mu.Unlock()
			if done && name != stack && (oldest == "" || l.Started.Before(s.ops[oldest].Started)) {
				oldest = name
			}
		}
		if oldest == "" {
			return // every kept log is running
		}
		delete(s.ops, oldest)
	}
}

// Handler is the server's routes. A state-changing request from another origin (a page on another
// port of the same host included: cookies ignore ports) is refused before authentication (Go's
// CrossOriginProtection: Sec-Fetch-Site, else Origin against Host); a {stack} that is not a stack
// name is refused before any handler reads it.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", bounded(s.page))
	mux.HandleFunc("GET /api/stacks", bounded(s.listStacks))
	mux.HandleFunc("GET /api/stacks/{stack}", bounded(withStack(s.outputs)))
	mux.HandleFunc("GET /api/stacks/{stack}/history", bounded(withStack(s.history)))
	mux.HandleFunc("GET /api/stacks/{stack}/events", withStack(s.events))
	mux.HandleFunc("POST /api/stacks/{stack}/{op}", bounded(withStack(s.operation)))
	var h http.Handler = mux
	if s.BasePath != "" {
		base := s.BasePath
		prefixed := http.NewServeMux()
		prefixed.Handle(base+"/", http.StripPrefix(base, mux))
		prefixed.Handle(base, http.RedirectHandler(base+"/", http.StatusMovedPermanently))
		h = prefixed
	}
	return securityHeaders(http.NewCrossOriginProtection().Handler(s.auth(h)))
}

// checkAllowRoll refuses an allowRoll that names no component.
func checkAllowRoll(v string) error {
	if v == "" || v == "all" {
		return nil
	}
	for _, c := range strings.Split(v, ",") {
		if !slices.Contains([]string{"Frontend", "Worker", "PrefillWorker", "DecodeWorker"}, c) {
			return invalidAt("allowRoll", fmt.Sprintf("%q is not a component: Frontend, Worker, PrefillWorker, DecodeWorker, comma-separated, or all", c))
		}
	}
	return nil
}

// SetInterruptions shows what Manager.Interruptions found (at start) on the page and in the stack
// list, until each stack is recovered.
func (s *Server) SetInterruptions(ins []Interruption) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.interrupted = map[string]Interruption{}
	for _, in := range ins {
		s.interrupted[in.Stack] = in
	}
}

func (s *Server) interruption(stack string) *Interruption {
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

// withStack refuses a request whose {stack} is not a stack name (400, the problem at "stack").
func withStack(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := CheckStackName(r.PathValue("stack")); err != nil {
			writeError(w, http.StatusBadRequest, err)
			return
		}
		h(w, r)
	}
}

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

// scrubError is err without the request's token in its text, its problems' messages included
// (a token pasted into another field must not come back in a response or an operation's log).
// The status is taken from err before.
func scrubError(err error, secret Secret) error {
	if err == nil || secret == "" || !strings.Contains(err.Error(), secret.Reveal()) {
		return err
	}
	var invalid *InvalidRequestError
	if errors.As(err, &invalid) {
		ps := make(config.Problems, len(invalid.Problems))
		for i, p := range invalid.Problems {
			p.Message = scrub(p.Message, secret)
			ps[i] = p
		}
		return &InvalidRequestError{Problems: ps}
	}
	return errors.New(scrub(err.Error(), secret))
}

func writeError(w http.ResponseWriter, status int, err error) {
	body := errorBody{Error: err.Error()}
	var invalid *InvalidRequestError
	if errors.As(err, &invalid) {
		for _, p := range invalid.Problems {
			body.Problems = append(body.Problems, problem{Key: p.Key, Message: p.Message})
		}
	}
	writeJSON(w, status, body)
}

func statusOf(err error) int {
	var invalid *InvalidRequestError
	switch {
	case errors.As(err, &invalid):
		return http.StatusBadRequest
	case errors.Is(err, ErrBusy):
		return http.StatusConflict
	case errors.Is(err, ErrUnknownStack):
		return http.StatusNotFound
	}
	return http.StatusInternalServerError
}

// StackInfo is one stack in the list.
type StackInfo struct {
	Name    string `json:"name"`
	Running string `json:"running,omitempty"`
	// Interrupted is what an earlier run left on the stack: POST …/recover clears it.
	Interrupted *Interruption `json:"interrupted,omitempty"`
}

func (s *Server) listStacks(w http.ResponseWriter, r *http.Request) {
	names, err := s.m.Stacks(r.Context())
	if err != nil {
		writeError(w, statusOf(err), err)
		return
	}
	out := []StackInfo{}
	for _, n := range names {
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

// maxBody is the largest request body the server reads.
const maxBody = 1 << 20

// readBody reads a POST's body strictly: JSON (Content-Type application/json) of at most maxBody
// bytes (413 beyond), no unknown field (a problem at its key), one value. No body is an empty one.
func readBody(w http.ResponseWriter, r *http.Request) (operationBody, int, error) {
	var body operationBody
	if r.ContentLength == 0 {
		return body, 0, nil
	}
	if t, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || t != "application/json" {
		return body, http.StatusUnsupportedMediaType, errors.New("a request body must be JSON, sent with Content-Type: application/json")
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	err := dec.Decode(&body)
	if err == nil {
		_, err = dec.Token()
		if errors.Is(err, io.EOF) {
			return body, 0, nil
		}
		if err == nil {
			err = errors.New("more than one JSON value")
		}
	}
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return body, http.StatusRequestEntityTooLarge, fmt.Errorf("the request body is larger than %d bytes", maxBody)
	case errors.Is(err, io.EOF):
		return body, 0, nil
	}
	if field, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return body, http.StatusBadRequest, invalidAt(strings.Trim(field, `"`), "unknown field (known fields: base, config, hfToken, plan)")
	}
	return body, http.StatusBadRequest, fmt.Errorf("body: %w", err)
}

// decodePlan reads the body's plan into v (absent or null leaves it zero); anything else is a
// problem at "plan".
func decodePlan(raw json.RawMessage, v any, want string) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return invalidAt("plan", "must be "+want+", got "+string(raw))
	}
	return nil
}

// invalidAt is a request problem at one key.
func invalidAt(key, msg string) error {
	return &InvalidRequestError{Problems: config.Problems{{Key: key, Message: msg}}}
}

// invalid makes config problems a request's.
func invalid(err error) error {
	if ps, ok := err.(config.Problems); ok {
		return &InvalidRequestError{Problems: ps}
	}
	return err
}

// operationBody is a POST's body.
type operationBody struct {
	Base    string          `json:"base"`
	Config  json.RawMessage `json:"config"`
	HFToken Secret          `json:"hfToken"`
	// Plan: for preview, true saves a plan; for up, the plan file a preview returned.
	Plan json.RawMessage `json:"plan"`
	// AllowRoll, for up: the graph components it may restart (comma-separated, or "all").
	AllowRoll string `json:"allowRoll"`
}

func (s *Server) operation(w http.ResponseWriter, r *http.Request) {
	stack, op := r.PathValue("stack"), r.PathValue("op")
	if op == "cancel" {
		// Answer at once: the operation's event stream says when it has stopped.
		if s.m.Running(stack) == "" {
			writeError(w, http.StatusConflict, fmt.Errorf("stack %s runs no operation here", stack))
			return
		}
		go func() { _ = s.m.Cancel(stack) }()
		writeJSON(w, http.StatusAccepted, map[string]string{"cancelling": stack, "events": s.at("/api/stacks/" + stack + "/events")})
		return
	}
	body, status, err := readBody(w, r)
	if err != nil {
		writeError(w, status, err)
		return
	}
	req := NewRequest(body.Base, stack)
	req.HFToken = body.HFToken
	if len(body.Config) > 0 {
		// Over the base profile's defaults: only what the body sets changes; an unknown field is a
		// problem at its key, never silently dropped.
		if err := config.Merge(&req.Config, body.Config); err != nil {
			writeError(w, http.StatusBadRequest, scrubError(invalid(err), body.HFToken))
			return
		}
	}
	log := newOpLog(op, s.MaxEvents)
	opts := RunOptions{Progress: log.add}
	var run func(ctx context.Context) (any, error)
	switch op {
	case "preview":
		var save bool
		if err := decodePlan(body.Plan, &save, "true to save a plan, or false"); err != nil {
			writeError(w, http.StatusBadRequest, scrubError(err, body.HFToken))
			return
		}
		if save {
			opts.Plan = s.m.planFile(stack)
		}
		run = func(ctx context.Context) (any, error) { return s.m.Preview(ctx, req, opts) }
	case "up":
		var plan string
		if err := decodePlan(body.Plan, &plan, "the plan file a preview of this stack returned"); err != nil {
			writeError(w, http.StatusBadRequest, scrubError(err, body.HFToken))
			return
		}
		if plan != "" && plan != s.m.planFile(stack) {
			writeError(w, http.StatusBadRequest, scrubError(invalidAt("plan", "not a plan a preview of this stack saved"), body.HFToken))
			return
		}
		opts.Plan = plan
		if err := checkAllowRoll(body.AllowRoll); err != nil {
			writeError(w, http.StatusBadRequest, scrubError(err, body.HFToken))
			return
		}
		opts.AllowRoll = body.AllowRoll
		run = func(ctx context.Context) (any, error) { return s.m.Up(ctx, req, opts) }
	case "refresh":
		run = func(ctx context.Context) (any, error) { return s.m.Refresh(ctx, stack, opts) }
	case "destroy":
		run = func(ctx context.Context) (any, error) { return nil, s.m.Destroy(ctx, stack, false, opts) }
	case "recover":
		run = func(ctx context.Context) (any, error) {
			in, err := s.m.Recover(ctx, stack, opts)
			if err == nil {
				s.mu.Lock()
				delete(s.interrupted, stack)
				s.mu.Unlock()
			}
			return in, err
		}
	default:
		writeError(w, http.StatusNotFound, scrubError(fmt.Errorf("no operation %q", op), body.HFToken))
		return
	}
	if running := s.m.Running(stack); running != "" {
		writeError(w, http.StatusConflict, scrubError(&BusyError{Stack: stack, Operation: running}, body.HFToken))
		return
	}
	started := make(chan error, 1)
	var once sync.Once
	opts.Progress = func(e Event) {
		once.Do(func() { started <- nil })
		log.add(e)
	}
	go func() {
		res, err := run(s.ctx)
		once.Do(func() { started <- err })
		if err == nil && res != nil {
			if b, jerr := json.Marshal(res); jerr == nil {
				log.add(Event{Time: time.Now(), Stack: stack, Status: "result", Message: string(b)})
			}
		}
		log.finish(scrubError(err, body.HFToken))
	}()
	if err := <-started; err != nil {
		// Refused (invalid, or busy after all): the stack's running or last operation keeps its log.
		writeError(w, statusOf(err), scrubError(err, body.HFToken))
		return
	}
	// Published only once the operation holds the stack and has started.
	s.publish(stack, log)
	writeJSON(w, http.StatusAccepted, map[string]string{"stack": stack, "operation": op, "events": s.at("/api/stacks/" + stack + "/events")})
}

// events streams the stack's running or last operation as server-sent events: "progress" for each
// Event, then "done" with the error, if any.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	stack := r.PathValue("stack")
	s.mu.Lock()
	log := s.ops[stack]
	s.mu.Unlock()
	if log == nil {
		writeError(w, http.StatusNotFound, fmt.Errorf("no operation on stack %s since the portal started", stack))
		return
	}
	flusher, ok := w.(http.Flusher)
	if !ok {
		writeError(w, http.StatusInternalServerError, errors.New("streaming unsupported"))
		return
	}
	s.mu.Lock()
	if s.MaxStreams > 0 && s.streams >= s.MaxStreams {
		s.mu.Unlock()
		w.Header().Set("Retry-After", "10")
		writeError(w, http.StatusTooManyRequests, fmt.Errorf("%d event streams are open, the most this portal serves at once: close one, or try again later", s.MaxStreams))
		return
	}
	s.streams++
	s.mu.Unlock()
	var releaseOnce sync.Once
	release := func() {
		releaseOnce.Do(func() {
			s.mu.Lock()
			s.streams--
			s.mu.Unlock()
		})
	}
	defer release()
	// The stream outlives the server's read and write limits.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("X-Accel-Buffering", "no") // a proxy in front must not hold events back
	w.WriteHeader(http.StatusOK)
	next := 0
	for {
		evs, upTo, done, errText, changed := log.since(next)
		for _, e := range evs {
			b, _ := json.Marshal(e)
			_, _ = fmt.Fprintf(w, "event: progress\ndata: %s\n\n", b)
		}
		next = upTo
		if done {
			// The slot is free before the client reads the last event: a client that opens its next
			// stream once this one said done is not refused for this one.
			release()
			b, _ := json.Marshal(map[string]string{"operation": log.Op, "error": errText})
			_, _ = fmt.Fprintf(w, "event: done\ndata: %s\n\n", b)
			flusher.Flush()
			return
		}
		flusher.Flush()
		select {
		case <-r.Context().Done():
			return
		case <-changed:
		case <-time.After(15 * time.Second):
			_, _ = fmt.Fprint(w, ": keep-alive\n\n")
		}
	}
}

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
	Outputs     *Outputs
	Error       string
	Interrupted *Interruption
}

var pageTemplate = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>minimax-m3 stacks</title>
<style nonce="{{.Nonce}}">
body{font-family:system-ui,sans-serif;margin:2rem;color:#222}
table{border-collapse:collapse;margin:.5rem 0}td,th{border:1px solid #ccc;padding:.2rem .5rem;text-align:left}
.running{color:#b60}.failed{color:#b00}.done{color:#060}pre{background:#f6f6f6;padding:.5rem;max-height:20rem;overflow:auto}
</style></head><body data-base="{{.Base}}">
<h1>minimax-m3 stacks</h1>
{{if .Error}}<p class="failed" id="list-error">{{.Error}}</p>{{end}}
{{if and (not .Stacks) (not .Error)}}<p id="empty">No stacks yet.</p>{{end}}
{{range .Stacks}}
<section class="stack" id="stack-{{.Name}}" data-stack="{{.Name}}">
<h2>{{.Name}}{{if .Running}} <span class="running">({{.Running}} running)</span>{{end}}</h2>
{{with .Outputs}}<table class="outputs">
<tr><th>namespace</th><td>{{.Namespace}}</td></tr>
<tr><th>graph</th><td>{{.GraphName}}</td></tr>
<tr><th>frontend</th><td>{{.FrontendURL}}</td></tr>
<tr><th>GPUs</th><td>{{.GPUCount}}</td></tr>
<tr><th>model</th><td>{{.Model}} @ {{.ModelRevision}}</td></tr>
<tr><th>draft</th><td>{{.DraftModel}} @ {{.DraftRevision}}</td></tr>
<tr><th>speculative decoding</th><td>{{.SpeculativeMode}}</td></tr>
</table>{{end}}
{{if .Error}}<p class="failed">{{.Error}}</p>{{end}}
{{with .Interrupted}}<div class="interrupted failed"><p>An earlier run left this stack interrupted{{if .Recoverable}} (recover it: POST api/stacks/{{.Stack}}/recover){{else}}; a lock belongs to an update that may still run{{end}}:</p><ul>
{{range .Locks}}<li>lock of {{.Username}}@{{.Hostname}}, pid {{.Pid}}, since {{.Since.Format "2006-01-02 15:04:05 MST"}}{{if .Stale}} (its process is gone){{end}}</li>{{end}}
{{range .Pending}}<li>pending: {{.}}</li>{{end}}
</ul></div>{{end}}
<p class="now">—</p>
<table class="resources"><thead><tr><th>resource</th><th>step</th><th>status</th><th>waited</th><th>last message</th></tr></thead><tbody></tbody></table>
</section>
{{end}}
<script nonce="{{.Nonce}}">
const base = document.body.dataset.base;
for (const section of document.querySelectorAll("section.stack")) {
  const stack = section.dataset.stack, rows = {}, body = section.querySelector(".resources tbody"), now = section.querySelector(".now");
  const source = new EventSource(base + "/api/stacks/" + encodeURIComponent(stack) + "/events");
  source.addEventListener("progress", (m) => {
    const e = JSON.parse(m.data);
    if (!e.name) { if (e.message) now.textContent = e.status + ": " + e.message; return; }
    let row = rows[e.urn || e.name];
    if (!row) {
      row = rows[e.urn || e.name] = body.insertRow();
      row.dataset.resource = e.name;
      for (let i = 0; i < 5; i++) row.insertCell();
      row.cells[0].textContent = e.name + (e.type ? " (" + e.type + ")" : "");
    }
    if (e.op) row.cells[1].textContent = e.op;
    row.cells[2].textContent = e.status;
    row.className = e.status;
    row.cells[3].textContent = e.elapsed ? Math.round(e.elapsed / 1e9) + " s" : "";
    if (e.message) row.cells[4].textContent = e.message;
    now.textContent = e.name + ": " + e.status + (e.message ? " — " + e.message : "");
  });
  source.addEventListener("done", (m) => {
    const d = JSON.parse(m.data);
    now.textContent = d.operation + (d.error ? " failed: " + d.error : " done");
    now.className = d.error ? "now failed" : "now done";
    source.close();
  });
  source.onerror = () => source.close();
}
</script>
</body></html>
`))

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
	for _, n := range names {
		ps := pageStack{Name: n, Running: s.m.Running(n), Interrupted: s.interruption(n)}
		out, err := s.m.Outputs(r.Context(), n)
		switch {
		case err == nil && out.GraphName != "": // a stack whose first update has not completed has none
			ps.Outputs = &out
		case err != nil && (ps.Running == "" || !errors.Is(err, ErrUnknownStack)): // (one being created has no state yet)
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
