package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"
)

// AuditRecord is one line of the audit log (JSON): who asked for what, and what came of it.
type AuditRecord struct {
	Time time.Time `json:"time"`
	// Phase is "received" on the record written before a request is served (nothing is served
	// when it cannot be written), "started" on the record written before an operation runs (with
	// its user; nothing runs when it cannot be written), and empty on a request's response and an
	// operation's end.
	Phase string `json:"phase,omitempty"`
	// User is the signed-in user; empty for a request that did not authenticate.
	User   string `json:"user,omitempty"`
	Remote string `json:"remote,omitempty"`
	Method string `json:"method,omitempty"`
	Path   string `json:"path,omitempty"`
	// Status is the response's HTTP status; 0 on the record of an operation's end.
	Status    int    `json:"status,omitempty"`
	Stack     string `json:"stack,omitempty"`
	Operation string `json:"operation,omitempty"`
	// Outcome, on the record of an operation's end: "succeeded", or "failed: " and the error.
	Outcome string `json:"outcome,omitempty"`
	// Config, on the record of a preview's or up's end: the stack's config values the request
	// set (what differs from its base's defaults, as the stack holds them; never the token).
	Config map[string]string `json:"config,omitempty"`
	// AllowRoll, Plan and Remove, on an operation's end: the consent an up was given, the plan
	// it applied or a preview saved, and whether a destroy removed the stack.
	AllowRoll string `json:"allowRoll,omitempty"`
	Plan      string `json:"plan,omitempty"`
	Remove    bool   `json:"remove,omitempty"`
}

// audit writes one record, if the server keeps an audit log, and says whether it could: a caller
// that is about to act refuses when it could not (the log fails closed).
func (s *Server) audit(rec AuditRecord) error {
	if s.AuditLog == nil {
		return nil
	}
	if rec.Time.IsZero() {
		rec.Time = time.Now().UTC()
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	s.auditMu.Lock()
	defer s.auditMu.Unlock()
	_, err = s.AuditLog.Write(append(b, '\n'))
	return err
}

// errAuditLog is the refusal of a request whose record cannot be written.
var errAuditLog = errors.New("the portal's audit log cannot be written, so nothing is served: an operation nobody can attribute does not run")

// audited records every request, reads included: a record when it arrives (a request whose record
// cannot be written is refused with 503, before anything is served) and one with its status and
// user when it is answered.
func (s *Server) audited(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a := AuditRecord{Remote: remoteHost(r), Method: r.Method, Path: r.URL.Path}
		if rest, ok := strings.CutPrefix(r.URL.Path, s.at("/api/stacks/")); ok {
			a.Stack, a.Operation, _ = strings.Cut(rest, "/")
		}
		received := a
		received.Phase = "received"
		if err := s.audit(received); err != nil {
			writeError(w, http.StatusServiceUnavailable, errAuditLog)
			return
		}
		rec := &statusRecorder{ResponseWriter: w}
		var user *User
		next.ServeHTTP(rec, r.WithContext(withUserSlot(r.Context(), &user)))
		a.Status = rec.status
		if a.Status == 0 {
			a.Status = http.StatusOK
		}
		if user != nil {
			a.User = user.Name
		}
		_ = s.audit(a) // the request has been served: its arrival is on record
	})
}

func remoteHost(r *http.Request) string {
	if h, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		return h
	}
	return r.RemoteAddr
}

// statusRecorder keeps the status a handler wrote; Unwrap lets http.ResponseController reach
// the connection (the event stream's flushes and deadlines).
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusRecorder) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// userSlotKey holds where auth puts the signed-in user, so that the audit record, written after
// the handler, names them.
type userSlotKey struct{}

func withUserSlot(ctx context.Context, slot **User) context.Context {
	return context.WithValue(ctx, userSlotKey{}, slot)
}

// signIn makes u the request's user: for its handlers, and for its audit record.
func signIn(r *http.Request, u *User) *http.Request {
	if slot, ok := r.Context().Value(userSlotKey{}).(**User); ok {
		*slot = u
	}
	return r.WithContext(context.WithValue(r.Context(), userKey{}, u))
}
