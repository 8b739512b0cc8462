package portal

import (
	"fmt"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
)

// Event is one step of an operation's progress, from the engine's event stream.
type Event struct {
	Time time.Time `json:"time"`
	// Stack is the stack the operation runs on.
	Stack string `json:"stack"`
	// URN, Type and Name are the resource's ("" for the operation itself).
	URN  string `json:"urn,omitempty"`
	Type string `json:"type,omitempty"`
	Name string `json:"name,omitempty"`
	// Op is the resource's step: create, update, replace, delete, same, refresh, read.
	Op string `json:"op,omitempty"`
	// Status is started, waiting (a message while the provider waits: the download Job's or the
	// graph's state), done or failed; for the operation: summary.
	Status string `json:"status"`
	// Message is what the engine or the provider said.
	Message string `json:"message,omitempty"`
	// Elapsed is how long the resource's step has run.
	Elapsed time.Duration `json:"elapsed,omitempty"`
}

// stream turns the engine's events into Events for progress (and the raw ones for also), and
// returns the channel to hand the engine and a function that waits until every event was handled:
// call it with the operation's error.
func (m *Manager) stream(r Request, progress func(Event), also func(events.EngineEvent)) (chan events.EngineEvent, func(error)) {
	ch := make(chan events.EngineEvent)
	done := make(chan struct{})
	go func() {
		defer close(done)
		started := map[string]time.Time{}
		for e := range ch {
			if also != nil {
				also(e)
			}
			if progress == nil {
				continue
			}
			for _, ev := range toEvents(e, started) {
				ev.Stack = r.Name()
				ev.Message = r.HFToken.Scrub(ev.Message)
				progress(ev)
			}
		}
	}()
	return ch, func(err error) { settle(done, err) }
}

// settle waits until an event stream handed to the Automation API was handled. The API closes the
// stream before an operation returns, once it tailed the engine's events; an operation that
// failed before it started (a cancelled context, a stack it could not select) never opened it, and
// then there is nothing to wait for beyond a moment.
func settle(done <-chan struct{}, err error) {
	if err == nil {
		<-done
		return
	}
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
}

func toEvents(e events.EngineEvent, started map[string]time.Time) []Event {
	now := time.Now()
	if e.Timestamp > 0 {
		now = time.Unix(int64(e.Timestamp), 0)
	}
	res := func(urn, typ, op, status, msg string) Event {
		ev := Event{Time: now, URN: urn, Type: typ, Name: urnName(urn), Op: op, Status: status, Message: msg}
		if t, ok := started[urn]; ok {
			ev.Elapsed = time.Since(t).Round(time.Second)
		}
		return ev
	}
	switch {
	case e.ResourcePreEvent != nil:
		md := e.ResourcePreEvent.Metadata
		if strings.HasPrefix(md.Type, "pulumi:providers:") {
			return nil
		}
		started[md.URN] = time.Now()
		return []Event{res(md.URN, md.Type, string(md.Op), "started", "")}
	case e.ResOutputsEvent != nil:
		md := e.ResOutputsEvent.Metadata
		if strings.HasPrefix(md.Type, "pulumi:providers:") {
			return nil
		}
		return []Event{res(md.URN, md.Type, string(md.Op), "done", "")}
	case e.ResOpFailedEvent != nil:
		md := e.ResOpFailedEvent.Metadata
		return []Event{res(md.URN, md.Type, string(md.Op), "failed", "")}
	case e.DiagnosticEvent != nil:
		d := e.DiagnosticEvent
		msg := strings.TrimSpace(d.Message)
		if msg == "" {
			return nil
		}
		status := "waiting"
		if d.Severity == "error" {
			status = "failed"
		}
		if d.URN == "" {
			return []Event{{Time: now, Status: d.Severity, Message: msg}}
		}
		return []Event{res(d.URN, "", "", status, msg)}
	case e.SummaryEvent != nil:
		var parts []string
		for op, n := range e.SummaryEvent.ResourceChanges {
			parts = append(parts, fmt.Sprintf("%s=%d", op, n))
		}
		return []Event{{Time: now, Status: "summary", Message: strings.Join(parts, " "),
			Elapsed: time.Duration(e.SummaryEvent.DurationSeconds) * time.Second}}
	}
	return nil
}
