package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"minimax-m3/portal"
	"net/http"
	"sync"
	"time"
)

// opLog is one operation's events, kept for the page and for late subscribers: at most max, the
// oldest dropped first.
type opLog struct {
	mu      sync.Mutex
	Op      string
	Started time.Time
	// Events are the kept events; first is the index (counting every event) of Events[0].
	Events []portal.Event
	first  int
	max    int
	Done   bool
	Err    string
	notify chan struct{}
}

func newOpLog(op string, max int) *opLog {
	return &opLog{Op: op, Started: time.Now(), max: max, notify: make(chan struct{})}
}

func (l *opLog) add(e portal.Event) {
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
func (l *opLog) since(i int) ([]portal.Event, int, bool, string, <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []portal.Event
	if i < l.first {
		out = append(out, portal.Event{Time: time.Now(), Status: "dropped", Message: fmt.Sprintf("%d earlier events of this operation are no longer kept", l.first-i)})
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

// events streams the stack's running or last operation as server-sent events: "progress" for each
// portal.Event, then "done" with the error, if any.
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
