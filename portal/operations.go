package portal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optrefresh"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"

	"minimax-m3/automation"
	"minimax-m3/config"
	"minimax-m3/policy"
)

// PreviewResult is what a preview would do.
type PreviewResult struct {
	// Changes counts steps by operation (create, update, replace, delete, same).
	Changes map[string]int `json:"changes"`
	// Steps lists each resource that would change.
	Steps []Step `json:"steps"`
	// Plan is the saved plan's file, when RunOptions.Plan asked for one.
	Plan string `json:"plan,omitempty"`
	// Rolls are the graph components the change restarts: the consent an up of it needs
	// (RunOptions.AllowRoll). Violations are the policies it breaks: an up of it is refused.
	Rolls      []string `json:"rolls,omitempty"`
	Violations []string `json:"violations,omitempty"`
}

// Step is one resource's planned change.
type Step struct {
	URN  string   `json:"urn"`
	Type string   `json:"type"`
	Name string   `json:"name"`
	Op   string   `json:"op"`
	Keys []string `json:"keys,omitempty"` // the changed top-level properties
}

// Preview previews the request's stack: its config is written first, so the stack holds it.
func (m *Manager) Preview(ctx context.Context, r Request, o RunOptions) (PreviewResult, error) {
	ctx, s, release, err := m.prepare(ctx, r, "preview", o)
	if err != nil {
		return PreviewResult{}, err
	}
	defer release()
	res := PreviewResult{Plan: o.Plan}
	var steps []policy.Step
	collect := func(e events.EngineEvent) {
		if ps, ok := policy.StepFromEvent(e); ok {
			steps = append(steps, ps)
		}
		if e.ResourcePreEvent == nil {
			return
		}
		md := e.ResourcePreEvent.Metadata
		if md.Op == "same" || strings.HasPrefix(md.Type, "pulumi:") {
			return
		}
		res.Steps = append(res.Steps, Step{URN: md.URN, Type: md.Type, Name: urnName(md.URN), Op: string(md.Op), Keys: md.Keys})
	}
	opts := []optpreview.Option{}
	if o.Plan != "" {
		if err := os.MkdirAll(filepath.Dir(o.Plan), 0o700); err != nil {
			return res, err
		}
		opts = append(opts, optpreview.Plan(o.Plan))
	}
	ch, wait := m.stream(r, o.Progress, collect)
	opts = append(opts, optpreview.EventStreams(ch))
	out, err := s.Preview(ctx, opts...)
	wait(err)
	if err != nil {
		return res, m.opError(r.Name(), err, r.HFToken)
	}
	if o.Plan != "" {
		if err := bindPlan(o.Plan, r); err != nil {
			return res, err
		}
	}
	res.Changes = map[string]int{}
	for op, n := range out.ChangeSummary {
		res.Changes[string(op)] = n
	}
	p := policy.Plan{Steps: steps, Adopted: r.Config.Adopt, ImageRegistries: m.imageRegistries(), PriorityClasses: m.o.PriorityClasses}
	for _, roll := range policy.Rolls(p) {
		if roll.Rolls {
			res.Rolls = append(res.Rolls, roll.Component)
		}
	}
	for _, v := range policy.Check(p) {
		res.Violations = append(res.Violations, v.String())
	}
	return res, nil
}

// Check previews the request's stack and checks it as Up does, applying nothing: every rule of
// package policy, and consent (RunOptions.AllowRoll) for each graph component the change would
// restart. A refusal is an *InvalidRequestError, as Up's. It is the gate of a runner that applies
// the request elsewhere (package portal/pko), on a Manager of the same backend, secrets provider
// and cluster as that runner's updates.
func (m *Manager) Check(ctx context.Context, r Request, o RunOptions) error {
	ctx, s, release, err := m.prepare(ctx, r, "check", o)
	if err != nil {
		return err
	}
	defer release()
	return m.checkPolicies(ctx, s, r, o)
}

// UpResult is an update's outcome.
type UpResult struct {
	Changes map[string]int `json:"changes"`
	Outputs Outputs        `json:"outputs"`
}

// Up deploys the request's stack (exactly RunOptions.Plan, when set: a plan Preview saved for
// this same request, else refused at "plan" before anything is touched; applied, it is dropped),
// once the policies pass on a
// preview of it: the rules the PR check runs (package policy), and consent (RunOptions.AllowRoll)
// for every graph component it would restart. Refused, it changes nothing but the stack's config.
func (m *Manager) Up(ctx context.Context, r Request, o RunOptions) (UpResult, error) {
	if o.Plan != "" {
		// Before anything is touched, the stack's config included.
		if err := checkPlan(o.Plan, r); err != nil {
			return UpResult{}, err
		}
	}
	ctx, s, release, err := m.prepare(ctx, r, "up", o)
	if err != nil {
		return UpResult{}, err
	}
	defer release()
	if o.Plan != "" {
		// Again, holding the stack: an up of the same plan that ran while this one waited for it
		// has used it.
		if err := checkPlan(o.Plan, r); err != nil {
			return UpResult{}, err
		}
	}
	if err := m.checkPolicies(ctx, s, r, o); err != nil {
		return UpResult{}, err
	}
	ch, wait := m.stream(r, o.Progress, nil)
	opts := []optup.Option{optup.EventStreams(ch)}
	if o.Plan != "" {
		opts = append(opts, optup.Plan(o.Plan))
	}
	out, err := s.Up(ctx, opts...)
	wait(err)
	if err != nil {
		err = m.opError(r.Name(), err, r.HFToken)
		if ctx.Err() != nil {
			// Cancelled: leave the stack ready for the next update.
			if cerr := m.clearPending(context.WithoutCancel(ctx), s); cerr != nil {
				err = errors.Join(err, cerr)
			}
		}
		return UpResult{}, err
	}
	if o.Plan != "" {
		dropPlan(o.Plan)
	}
	res := UpResult{Changes: map[string]int{}, Outputs: outputsOf(out.Outputs)}
	if out.Summary.ResourceChanges != nil {
		for op, n := range *out.Summary.ResourceChanges {
			res.Changes[op] = n
		}
	}
	return res, nil
}

// Refresh reads the stack's resources back from the cluster.
func (m *Manager) Refresh(ctx context.Context, stack string, o RunOptions) (map[string]int, error) {
	ctx, err := m.actingAs(ctx, o)
	if err != nil {
		return nil, err
	}
	ctx, release, err := m.acquire(ctx, stack, "refresh", o.Wait)
	if err != nil {
		return nil, err
	}
	defer release()
	s, err := m.open(ctx, stack, false)
	if err != nil {
		return nil, err
	}
	ch, wait := m.stream(Request{Stack: stack}, o.Progress, nil)
	out, err := s.Refresh(ctx, optrefresh.EventStreams(ch))
	wait(err)
	if err != nil {
		return nil, m.opError(stack, err, "")
	}
	changes := map[string]int{}
	if out.Summary.ResourceChanges != nil {
		for op, n := range *out.Summary.ResourceChanges {
			changes[op] = n
		}
	}
	return changes, nil
}

// Destroy deletes the stack's resources (the retained cache claim stays) and, with removeStack,
// the stack and its workspace.
func (m *Manager) Destroy(ctx context.Context, stack string, removeStack bool, o RunOptions) error {
	ctx, err := m.actingAs(ctx, o)
	if err != nil {
		return err
	}
	ctx, release, err := m.acquire(ctx, stack, "destroy", o.Wait)
	if err != nil {
		return err
	}
	defer release()
	s, err := m.open(ctx, stack, false)
	if err != nil {
		return err
	}
	ch, wait := m.stream(Request{Stack: stack}, o.Progress, nil)
	opts := []optdestroy.Option{optdestroy.EventStreams(ch)}
	if removeStack {
		opts = append(opts, optdestroy.Remove())
	}
	_, err = s.Destroy(ctx, opts...)
	wait(err)
	if err != nil {
		return m.opError(stack, err, "")
	}
	if removeStack {
		return m.root.RemoveAll(workspace(stack))
	}
	return nil
}

// clearPending leaves no pending operation an interrupted update left in the state: resources
// whose creation was interrupted are imported from the cluster (`pulumi refresh
// --import-pending-creates`), and any other pending operation is dropped by exporting and
// importing the state, the documented way.
func (m *Manager) clearPending(ctx context.Context, s automation.Stack) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	dep, err := s.Export(ctx)
	if err != nil {
		return err
	}
	var state struct {
		Pending []struct {
			Type     string `json:"type"`
			Resource struct {
				URN    string         `json:"urn"`
				Custom bool           `json:"custom"`
				Inputs map[string]any `json:"inputs"`
			} `json:"resource"`
		} `json:"pending_operations"`
	}
	if err := json.Unmarshal(dep.Deployment, &state); err != nil {
		return err
	}
	if len(state.Pending) == 0 {
		return nil
	}
	var creates []optrefresh.PendingCreate
	for _, p := range state.Pending {
		if p.Type != "creating" || !p.Resource.Custom {
			continue
		}
		md, _ := p.Resource.Inputs["metadata"].(map[string]any)
		name, _ := md["name"].(string)
		if name == "" {
			continue
		}
		id := name
		if ns, _ := md["namespace"].(string); ns != "" {
			id = ns + "/" + name
		}
		creates = append(creates, optrefresh.PendingCreate{URN: p.Resource.URN, ID: id})
	}
	if len(creates) > 0 {
		if _, err := s.Refresh(ctx, optrefresh.ImportPendingCreates(creates)); err != nil {
			return fmt.Errorf("importing interrupted creations: %w", err)
		}
		if dep, err = s.Export(ctx); err != nil {
			return err
		}
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(dep.Deployment, &raw); err != nil {
		return err
	}
	if _, ok := raw["pending_operations"]; !ok {
		return nil
	}
	delete(raw, "pending_operations")
	if dep.Deployment, err = json.Marshal(raw); err != nil {
		return err
	}
	return s.Import(ctx, dep)
}

func urnName(urn string) string {
	if i := strings.LastIndex(urn, "::"); i >= 0 {
		return urn[i+2:]
	}
	return urn
}

// checkPolicies previews the stack and checks the plan as the PR check does: every rule of package
// policy, and consent for each component that rolls. A refusal is an InvalidRequestError: the
// rules' violations at "policy", each unconsented roll at "allowRoll".
func (m *Manager) checkPolicies(ctx context.Context, s automation.Stack, r Request, o RunOptions) error {
	ch := make(chan events.EngineEvent)
	stepsc := make(chan []policy.Step, 1)
	go func() { stepsc <- policy.Collect(ch) }()
	_, err := s.Preview(ctx, optpreview.EventStreams(ch))
	if err != nil {
		// The stream may never have been opened (a cancelled context): its steps do not matter.
		return m.opError(r.Name(), err, r.HFToken)
	}
	steps := <-stepsc
	p := policy.Plan{Steps: steps, Adopted: r.Config.Adopt, ImageRegistries: m.imageRegistries(), PriorityClasses: m.o.PriorityClasses}
	rolls := policy.Rolls(p)
	var ps config.Problems
	for _, v := range policy.Check(p) {
		ps.Add("policy", "%s", v)
	}
	for _, roll := range policy.UnexpectedRolls(rolls, o.AllowRoll) {
		ps.Add("allowRoll", "%s of %s restarts (%s): name it in allowRoll (or \"all\") to consent, as a pull request's allow-worker-roll label does",
			roll.Component, roll.Graph, strings.Join(policy.Compact(roll.Why), ", "))
	}
	if len(ps) > 0 {
		// Before any progress: the service answers the request itself with the problems (400).
		return &InvalidRequestError{Problems: ps}
	}
	if o.Progress != nil {
		msg := fmt.Sprintf("policies passed on a preview: %d rules, %d resources", len(policy.Rules), len(steps))
		if summary := policy.Summary(rolls); len(summary) > 0 {
			msg += "; " + strings.Join(summary, "; ")
		}
		o.Progress(Event{Time: time.Now(), Stack: r.Name(), Status: "policy", Message: r.HFToken.Scrub(msg)})
	}
	return nil
}
