package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"minimax-m3/config"
	"minimax-m3/portal"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

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
		return body, http.StatusBadRequest, invalidAt(strings.Trim(field, `"`), "unknown field (known fields: base, config, hfToken, plan, allowRoll, remove)")
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
	return &portal.InvalidRequestError{Problems: config.Problems{{Key: key, Message: msg}}}
}

// invalid makes config problems a request's.
func invalid(err error) error {
	if ps, ok := err.(config.Problems); ok {
		return &portal.InvalidRequestError{Problems: ps}
	}
	return err
}

// operationBody is a POST's body.
type operationBody struct {
	Base    string          `json:"base"`
	Config  json.RawMessage `json:"config"`
	HFToken portal.Secret   `json:"hfToken"`
	// Plan: for preview, true saves a plan; for up, the plan file a preview returned.
	Plan json.RawMessage `json:"plan"`
	// AllowRoll, for up: the graph components it may restart (comma-separated, or "all").
	AllowRoll string `json:"allowRoll"`
	// Remove, for destroy: remove the stack from the backend too (its history goes with it),
	// which frees its place under the portal's limit of stacks.
	Remove bool `json:"remove"`
}

func (s *Server) operation(w http.ResponseWriter, r *http.Request) {
	stack, op := r.PathValue("stack"), r.PathValue("op")
	if op == "cancel" {
		// Bound to its namespace as every other operation (below): a stack pattern that happens
		// to match does not reach another team's running update.
		if !s.mayActOn(w, r, stack, "") {
			return
		}
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
	req := portal.NewRequest(body.Base, stack)
	req.HFToken = body.HFToken
	if len(body.Config) > 0 {
		// Over the base profile's defaults: only what the body sets changes; an unknown field is a
		// problem at its key, never silently dropped.
		if err := config.Merge(&req.Config, body.Config); err != nil {
			writeError(w, http.StatusBadRequest, portal.ScrubError(invalid(err), body.HFToken))
			return
		}
	}
	user := userOf(r.Context())
	// (No namespace at all is validation's problem: 400, namespace.name required.) Before any plan is
	// read or any engine starts: the user's grants, not the request, say where it may land, the
	// stack's namespace and the dashboard's ConfigMap's alike, and which hostname its route takes.
	if op == "preview" || op == "up" {
		for _, at := range [][2]string{{"namespace.name", req.Config.Namespace.Name}, {"observability.dashboard.namespace", dashboardNamespace(req.Config)}} {
			key, ns := at[0], at[1]
			if ns != "" && !user.MayDeployTo(ns) {
				writeError(w, http.StatusForbidden, invalidAt(key, fmt.Sprintf("%s may not deploy into namespace %q (their namespaces: %s)",
					nameOf(user), ns, strings.Join(user.Namespaces, ", "))))
				return
			}
		}
		if e := req.Config.Exposure; e.Enabled && !user.MayRoute(e.Hostname) {
			writeError(w, http.StatusForbidden, invalidAt("exposure.hostname", fmt.Sprintf("%s may not route hostname %q on the site's Gateways (their hostnames: %s)",
				nameOf(user), e.Hostname, strings.Join(user.Hostnames, ", "))))
			return
		}
	}
	// A stack is bound to the namespace it deploys into: acting on it (a destroy, a refresh, an up
	// that moves it) needs that namespace's grant, not only a stack pattern that matches its name.
	// (A preview or up that names no namespace is validation's to refuse, with nothing read.)
	if (op != "preview" && op != "up") || req.Config.Namespace.Name != "" {
		if !s.mayActOn(w, r, stack, body.HFToken) {
			return
		}
	}
	log := newOpLog(op, s.MaxEvents)
	opts := portal.RunOptions{Progress: log.add, Identity: portal.Identity{User: user.Name, Groups: user.Groups}}
	var run func(ctx context.Context) (any, error)
	switch op {
	case "preview":
		var save bool
		if err := decodePlan(body.Plan, &save, "true to save a plan, or false"); err != nil {
			writeError(w, http.StatusBadRequest, portal.ScrubError(err, body.HFToken))
			return
		}
		var id string
		if save {
			var err error
			if id, err = portal.NewPlanID(); err != nil {
				writeError(w, http.StatusInternalServerError, err)
				return
			}
			opts.Plan = s.m.PlanFile(stack, id)
		}
		run = func(ctx context.Context) (any, error) {
			res, err := s.m.Preview(ctx, req, opts)
			res.Plan = "" // the plan's name, never the server's path
			if err == nil {
				res.Plan = id
			}
			return res, err
		}
	case "up":
		var plan string
		if err := decodePlan(body.Plan, &plan, "the plan a preview of this stack returned"); err != nil {
			writeError(w, http.StatusBadRequest, portal.ScrubError(err, body.HFToken))
			return
		}
		if plan != "" {
			if err := portal.CheckPlanID(plan); err != nil {
				writeError(w, http.StatusBadRequest, portal.ScrubError(err, body.HFToken))
				return
			}
			opts.Plan = s.m.PlanFile(stack, plan)
			if err := s.m.CheckPlan(opts.Plan, req); err != nil {
				writeError(w, statusOf(err), portal.ScrubError(err, body.HFToken))
				return
			}
		}
		if err := checkAllowRoll(body.AllowRoll); err != nil {
			writeError(w, http.StatusBadRequest, portal.ScrubError(err, body.HFToken))
			return
		}
		opts.AllowRoll = body.AllowRoll
		run = func(ctx context.Context) (any, error) { return s.m.Up(ctx, req, opts) }
	case "refresh":
		run = func(ctx context.Context) (any, error) { return s.m.Refresh(ctx, stack, opts) }
	case "destroy":
		run = func(ctx context.Context) (any, error) { return nil, s.m.Destroy(ctx, stack, body.Remove, opts) }
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
		writeError(w, http.StatusNotFound, portal.ScrubError(fmt.Errorf("no operation %q", op), body.HFToken))
		return
	}
	if running := s.m.Running(stack); running != "" {
		writeError(w, http.StatusConflict, portal.ScrubError(&portal.BusyError{Stack: stack, Operation: running}, body.HFToken))
		return
	}
	// Who starts what, on record before it runs: an operation whose record cannot be written does
	// not run.
	if err := s.audit(AuditRecord{Phase: "started", User: user.Name, Remote: remoteHost(r), Stack: stack, Operation: op}); err != nil {
		writeError(w, http.StatusServiceUnavailable, errAuditLog)
		return
	}
	started := make(chan error, 1)
	var once sync.Once
	opts.Progress = func(e portal.Event) {
		once.Do(func() { started <- nil })
		log.add(e)
	}
	s.running.Add(1)
	go func() {
		defer s.running.Done()
		res, err := run(s.ctx)
		once.Do(func() { started <- err })
		if err == nil && res != nil {
			if b, jerr := json.Marshal(res); jerr == nil {
				log.add(portal.Event{Time: time.Now(), Stack: stack, Status: "result", Message: string(b)})
			}
		}
		err = portal.ScrubError(err, body.HFToken)
		log.finish(err)
		outcome := "succeeded"
		if err != nil {
			outcome = "failed: " + err.Error()
		}
		rec := AuditRecord{User: user.Name, Stack: stack, Operation: op, Outcome: outcome, AllowRoll: opts.AllowRoll, Remove: body.Remove}
		if opts.Plan != "" {
			rec.Plan = filepath.Base(opts.Plan)
		}
		if op == "preview" || op == "up" {
			if values, err := req.SiteValues(); err == nil {
				for k, v := range values {
					values[k] = body.HFToken.Scrub(v)
				}
				rec.Config = values
			}
		}
		_ = s.audit(rec) // the operation has run: its start is on record
	}()
	if err := <-started; err != nil {
		// Refused (invalid, or busy after all): the stack's running or last operation keeps its log.
		writeError(w, statusOf(err), portal.ScrubError(err, body.HFToken))
		return
	}
	// Published only once the operation holds the stack and has started.
	s.publish(stack, log)
	writeJSON(w, http.StatusAccepted, map[string]string{"stack": stack, "operation": op, "events": s.at("/api/stacks/" + stack + "/events")})
}

// dashboardNamespace is the namespace a request's Grafana dashboard lands in when it names one of
// its own ("" otherwise: the stack's namespace, or no dashboard).
func dashboardNamespace(c config.Config) string {
	if o := c.Observability; o.Enabled && o.Dashboard.Enabled {
		return o.Dashboard.Namespace
	}
	return ""
}

// mayActOn refuses (and answers) a request on a stack whose namespace the user may not deploy
// into, and one whose namespace cannot be told: a stack is bound to its namespace.
func (s *Server) mayActOn(w http.ResponseWriter, r *http.Request, stack string, token portal.Secret) bool {
	user := userOf(r.Context())
	current, err := s.m.StackNamespace(r.Context(), stack)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, portal.ScrubError(fmt.Errorf("cannot tell which namespace stack %s deploys into, so nothing runs: %w", stack, err), token))
		return false
	}
	if current != "" && !user.MayDeployTo(current) {
		writeError(w, http.StatusForbidden, invalidAt("stack", fmt.Sprintf("stack %s deploys into namespace %q, which %s may not deploy into (their namespaces: %s)",
			stack, current, nameOf(user), strings.Join(user.Namespaces, ", "))))
		return false
	}
	return true
}
