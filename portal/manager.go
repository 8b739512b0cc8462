package portal

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/opthistory"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optrefresh"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"gopkg.in/yaml.v3"

	"minimax-m3/automation"
	"minimax-m3/config"
	"minimax-m3/policy"
)

// Options say where the project is and where stacks live.
type Options struct {
	// ProjectDir holds Pulumi.yaml and the base stack files (Pulumi.agg.yaml, Pulumi.disagg.yaml).
	ProjectDir string
	// StateDir is the portal's own durable directory: one workspace per stack (its stack file, with
	// the stack's config), saved plans, and the default backend's state.
	StateDir string
	// BackendURL is any Pulumi backend (file://…, s3://…, https://api.pulumi.com); default
	// file://<StateDir>/state.
	BackendURL string
	// SecretsProvider is the stack's secrets provider on creation: "passphrase" (default; the
	// passphrase from PULUMI_CONFIG_PASSPHRASE or PULUMI_CONFIG_PASSPHRASE_FILE in EnvVars),
	// awskms://…, gcpkms://…, azurekeyvault://…, hashivault://….
	SecretsProvider string
	// EnvVars go to the Pulumi CLI and the provider: the passphrase, cloud credentials, KUBECONFIG.
	EnvVars map[string]string
}

// Manager runs operations on stacks, one at a time per stack.
type Manager struct {
	o Options
	// root confines every file the manager writes to the state directory: a stack name can never
	// reach outside it, whatever a request carries.
	root *os.Root
	// project is the program's Pulumi.yaml, which every workspace holds.
	project []byte
	mu      sync.Mutex
	running map[string]*running
	// opening counts the opens of each stack in flight (open).
	opening map[string]int
}

type running struct {
	op     string
	cancel context.CancelFunc
	done   chan struct{}
	// unknown: the operation found no such stack on the backend; its release removes the
	// workspace directory (once no open of the stack is in flight).
	unknown bool
}

// New checks the options and makes the state directory.
func New(o Options) (*Manager, error) {
	project, err := os.ReadFile(filepath.Join(o.ProjectDir, "Pulumi.yaml"))
	if err != nil {
		return nil, fmt.Errorf("project: %w", err)
	}
	if o.StateDir == "" {
		return nil, errors.New("StateDir is required")
	}
	abs, err := filepath.Abs(o.StateDir)
	if err != nil {
		return nil, err
	}
	o.StateDir = abs
	if o.BackendURL == "" {
		o.BackendURL = "file://" + filepath.Join(abs, "state")
		if err := os.MkdirAll(filepath.Join(abs, "state"), 0o700); err != nil {
			return nil, err
		}
	}
	if o.SecretsProvider == "" {
		o.SecretsProvider = "passphrase"
	}
	if err := os.MkdirAll(filepath.Join(abs, "workspaces"), 0o700); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(abs)
	if err != nil {
		return nil, err
	}
	return &Manager{o: o, root: root, project: project, running: map[string]*running{}, opening: map[string]int{}}, nil
}

// ErrBusy is what every BusyError is.
var ErrBusy = errors.New("busy")

// BusyError says a stack already runs an operation (here, or in another process holding the
// backend's lock).
type BusyError struct {
	Stack, Operation string
}

func (e *BusyError) Error() string {
	if e.Operation == "" {
		return fmt.Sprintf("stack %s is busy: another process is updating it", e.Stack)
	}
	return fmt.Sprintf("stack %s is busy: %s is running", e.Stack, e.Operation)
}

// Is makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// InvalidRequestError carries every problem of a request, each naming its config key.
type InvalidRequestError struct{ Problems config.Problems }

func (e *InvalidRequestError) Error() string { return e.Problems.Error() }

// ErrUnknownStack is returned for a stack the backend does not have.
var ErrUnknownStack = errors.New("unknown stack")

// RunOptions change how an operation runs.
type RunOptions struct {
	// Wait waits for the stack's running operation to end instead of returning a BusyError.
	Wait bool
	// Progress receives the operation's events as they happen.
	Progress func(Event)
	// Plan: Preview saves the plan there; Up runs exactly that plan (the engine rejects the update
	// if the program or the config no longer produce it).
	Plan string
	// AllowRoll is the consent an Up needs to restart graph components' pods, as the PR check's
	// label gives it: the components it may roll (Frontend,Worker,PrefillWorker,DecodeWorker), or
	// "all". Empty: an up that would roll any is refused.
	AllowRoll string
}

// holdsKey marks the context of an operation with the stack it holds (acquire).
type holdsKey struct{}

// acquire reserves a stack for an operation; release with the returned function. The returned
// context is the operation's.
func (m *Manager) acquire(ctx context.Context, stack, op string, wait bool) (context.Context, func(), error) {
	if err := CheckStackName(stack); err != nil {
		return nil, nil, err
	}
	for {
		m.mu.Lock()
		r, ok := m.running[stack]
		if !ok {
			ctx, cancel := context.WithCancel(context.WithValue(ctx, holdsKey{}, stack))
			r = &running{op: op, cancel: cancel, done: make(chan struct{})}
			m.running[stack] = r
			m.mu.Unlock()
			return ctx, func() {
				m.mu.Lock()
				delete(m.running, stack)
				if r.unknown && m.opening[stack] == 0 {
					_ = m.root.RemoveAll(workspace(stack))
				}
				m.mu.Unlock()
				cancel()
				close(r.done)
			}, nil
		}
		m.mu.Unlock()
		if !wait {
			return nil, nil, &BusyError{Stack: stack, Operation: r.op}
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-r.done:
		}
	}
}

// Running is the operation a stack runs in this process, or "".
func (m *Manager) Running(stack string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r, ok := m.running[stack]; ok {
		return r.op
	}
	return ""
}

// Wait returns once no operation runs in this process, or with ctx's error.
func (m *Manager) Wait(ctx context.Context) error {
	for {
		m.mu.Lock()
		var done <-chan struct{}
		for _, r := range m.running {
			done = r.done
			break
		}
		m.mu.Unlock()
		if done == nil {
			return nil
		}
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// RunningStacks are the stacks running an operation in this process.
func (m *Manager) RunningStacks() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.running))
}

// Cancel stops the operation a stack runs in this process, and returns once it ended; the stack is
// left ready for the next operation.
func (m *Manager) Cancel(stack string) error {
	m.mu.Lock()
	r, ok := m.running[stack]
	m.mu.Unlock()
	if !ok {
		return fmt.Errorf("stack %s runs no operation here", stack)
	}
	r.cancel()
	<-r.done
	return nil
}

// workspace is a stack's workspace directory, relative to the state directory (m.root).
func workspace(stack string) string { return filepath.Join("workspaces", stack) }

func (m *Manager) env() map[string]string {
	env := map[string]string{"PULUMI_BACKEND_URL": m.o.BackendURL, "PULUMI_SKIP_UPDATE_CHECK": "true"}
	for k, v := range m.o.EnvVars {
		env[k] = v
	}
	return env
}

// open selects or creates the stack in its own workspace, on the backend. The name is checked
// first; an unknown stack leaves no workspace behind, whoever asked: the last open of it in
// flight removes the directory, or the operation holding the stack does when it ends, if that
// operation found no stack either (another one may be creating the stack in it).
func (m *Manager) open(ctx context.Context, stack string, create bool) (automation.Stack, error) {
	if err := CheckStackName(stack); err != nil {
		return automation.Stack{}, err
	}
	dir := workspace(stack)
	m.mu.Lock()
	m.opening[stack]++
	m.mu.Unlock()
	s, err := m.selectStack(ctx, stack, dir, create)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.opening[stack]--; m.opening[stack] == 0 {
		delete(m.opening, stack)
	}
	if err != nil && !create && auto.IsSelectStack404Error(err) {
		r, held := m.running[stack]
		switch {
		case held && ctx.Value(holdsKey{}) == stack:
			r.unknown = true
			if m.opening[stack] == 0 {
				_ = m.root.RemoveAll(dir)
			}
		case !held && m.opening[stack] == 0:
			_ = m.root.RemoveAll(dir)
		}
		return s, fmt.Errorf("%w: %s", ErrUnknownStack, stack)
	}
	return s, err
}

func (m *Manager) selectStack(ctx context.Context, stack, dir string, create bool) (automation.Stack, error) {
	if err := m.writeProjectFile(dir); err != nil {
		return automation.Stack{}, err
	}
	o := automation.Options{ProjectDir: filepath.Join(m.o.StateDir, dir), Stack: stack, EnvVars: m.env(), SecretsProvider: m.o.SecretsProvider}
	if create {
		return automation.NewStack(ctx, o)
	}
	return automation.SelectStack(ctx, o)
}

// writeProjectFile puts the program's Pulumi.yaml in a workspace directory (relative to the
// state directory): written beside it and renamed into place, so a CLI reading it never sees
// it half written.
func (m *Manager) writeProjectFile(dir string) error {
	if err := m.root.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	file := filepath.Join(dir, "Pulumi.yaml")
	if b, err := m.root.ReadFile(file); err == nil && bytes.Equal(b, m.project) {
		return nil
	}
	tmp := filepath.Join(dir, ".Pulumi.yaml."+rand.Text())
	if err := m.root.WriteFile(tmp, m.project, 0o644); err != nil {
		return err
	}
	if err := m.root.Rename(tmp, file); err != nil {
		_ = m.root.Remove(tmp)
		return err
	}
	return nil
}

// baseValues are the `minimax-m3:` values the committed base stack file sets.
func (m *Manager) baseValues(base string) (map[string]string, error) {
	b, err := os.ReadFile(filepath.Join(m.o.ProjectDir, "Pulumi."+base+".yaml"))
	if err != nil {
		return nil, err
	}
	var f struct {
		Config map[string]any `yaml:"config"`
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("base stack file of %s: %w", base, err)
	}
	out := map[string]string{}
	for k, v := range f.Config {
		key, ok := strings.CutPrefix(k, config.Namespace+":")
		if !ok {
			continue
		}
		if s, ok := v.(string); ok {
			out[key] = s
			continue
		}
		j, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		out[key] = string(j)
	}
	return out, nil
}

// configure makes the stack's config exactly the request's: the base stack file's values, the
// site values, and the token, which reaches the CLI on its standard input only.
func (m *Manager) configure(ctx context.Context, s automation.Stack, r Request) error {
	want, err := m.baseValues(r.Base)
	if err != nil {
		return err
	}
	site, err := r.siteValues()
	if err != nil {
		return err
	}
	for k, v := range site {
		want[k] = v
	}
	have, err := s.GetAllConfig(ctx)
	if err != nil {
		return err
	}
	var stale []string
	for full := range have {
		k, ok := strings.CutPrefix(full, config.Namespace+":")
		if !ok || (k == config.HFTokenKey && !r.Config.HuggingFace.ExistingSecret) {
			// The stored token stays unless the request switches to an existing Secret, which
			// takes its place.
			continue
		}
		if _, keep := want[k]; !keep {
			stale = append(stale, full)
		}
	}
	if len(stale) > 0 {
		slices.Sort(stale)
		if err := s.RemoveAllConfig(ctx, stale); err != nil {
			return err
		}
	}
	values := auto.ConfigMap{}
	for k, v := range want {
		if cur, ok := have[config.Key(k)]; ok && cur.Value == v && !cur.Secret {
			continue
		}
		values[config.Key(k)] = auto.ConfigValue{Value: v}
	}
	if len(values) > 0 {
		if err := s.SetAllConfig(ctx, values); err != nil {
			return err
		}
	}
	if r.HFToken != "" {
		return automation.SetSecret(ctx, s.Stack, config.Key(config.HFTokenKey), r.HFToken.Reveal(), false)
	}
	return nil
}

// prepare validates the request, reserves the stack and writes its config.
func (m *Manager) prepare(ctx context.Context, r Request, op string, o RunOptions) (context.Context, automation.Stack, func(), error) {
	stored := false
	if r.HFToken == "" && !r.Config.HuggingFace.ExistingSecret && r.Validate() != nil {
		// The stack may hold the token already. (A request that switches to an existing Secret
		// needs none: configure removes a stored one.)
		stored = m.holdsToken(r.Name())
	}
	if ps := r.validate(stored); len(ps) > 0 {
		return nil, automation.Stack{}, nil, scrubError(&InvalidRequestError{Problems: ps}, r.HFToken)
	}
	ctx, release, err := m.acquire(ctx, r.Name(), op, o.Wait)
	if err != nil {
		return nil, automation.Stack{}, nil, err
	}
	s, err := m.open(ctx, r.Name(), true)
	if err == nil {
		err = m.configure(ctx, s, r)
	}
	if err != nil {
		release()
		return nil, automation.Stack{}, nil, fmt.Errorf("stack %s: %w", r.Name(), err)
	}
	return ctx, s, release, nil
}

// holdsToken says whether an existing stack's config has the token, from its stack file (the
// token is not decrypted to find out).
func (m *Manager) holdsToken(stack string) bool {
	b, err := m.root.ReadFile(filepath.Join(workspace(stack), "Pulumi."+stack+".yaml"))
	if err != nil {
		return false
	}
	var f struct {
		Config map[string]any `yaml:"config"`
	}
	if yaml.Unmarshal(b, &f) != nil {
		return false
	}
	v, ok := f.Config[config.Key(config.HFTokenKey)].(map[string]any)
	return ok && v["secure"] != nil
}

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
	res.Changes = map[string]int{}
	for op, n := range out.ChangeSummary {
		res.Changes[string(op)] = n
	}
	p := policy.Plan{Steps: steps, Adopted: r.Config.Adopt}
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

// UpResult is an update's outcome.
type UpResult struct {
	Changes map[string]int `json:"changes"`
	Outputs Outputs        `json:"outputs"`
}

// Up deploys the request's stack (exactly RunOptions.Plan, when set), once the policies pass on a
// preview of it: the rules the PR check runs (package policy), and consent (RunOptions.AllowRoll)
// for every graph component it would restart. Refused, it changes nothing but the stack's config.
func (m *Manager) Up(ctx context.Context, r Request, o RunOptions) (UpResult, error) {
	ctx, s, release, err := m.prepare(ctx, r, "up", o)
	if err != nil {
		return UpResult{}, err
	}
	defer release()
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

// Stacks lists the stacks on the backend, and those whose first operation here has reserved them
// but not yet created them there: a stack being started shows at once, to every client.
func (m *Manager) Stacks(ctx context.Context) ([]string, error) {
	dir := filepath.Join("workspaces", ".list")
	if err := m.writeProjectFile(dir); err != nil {
		return nil, err
	}
	cli, err := automation.PulumiCommand()
	if err != nil {
		return nil, err
	}
	ws, err := auto.NewLocalWorkspace(ctx, auto.WorkDir(filepath.Join(m.o.StateDir, dir)), auto.EnvVars(m.env()), auto.Pulumi(cli))
	if err != nil {
		return nil, err
	}
	list, err := ws.ListStacks(ctx)
	if err != nil {
		return nil, err
	}
	names := m.RunningStacks()
	for _, s := range list {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// Outputs reads a stack's outputs, decrypting nothing.
func (m *Manager) Outputs(ctx context.Context, stack string) (Outputs, error) {
	s, err := m.open(ctx, stack, false)
	if err != nil {
		return Outputs{}, err
	}
	// Read without --show-secrets: nothing of the state (the token included) is decrypted to show
	// outputs, which hold no secret.
	out, err := automation.PlainOutputs(ctx, s.Stack)
	if err != nil {
		return Outputs{}, m.opError(stack, err, "")
	}
	return outputsFromMap(out), nil
}

// Update is one entry of a stack's history.
type Update struct {
	Version   int            `json:"version"`
	Kind      string         `json:"kind"`
	Result    string         `json:"result"`
	Message   string         `json:"message,omitempty"`
	StartTime string         `json:"startTime"`
	EndTime   string         `json:"endTime,omitempty"`
	Changes   map[string]int `json:"changes,omitempty"`
}

// History lists a stack's updates, newest first, decrypting nothing.
func (m *Manager) History(ctx context.Context, stack string, pageSize, page int) ([]Update, error) {
	s, err := m.open(ctx, stack, false)
	if err != nil {
		return nil, err
	}
	// Without --show-secrets: the history's config (the token included) stays encrypted.
	list, err := s.History(ctx, pageSize, page, opthistory.ShowSecrets(false))
	if err != nil {
		return nil, m.opError(stack, err, "")
	}
	out := make([]Update, 0, len(list))
	for _, u := range list {
		e := Update{Version: u.Version, Kind: u.Kind, Result: u.Result, Message: u.Message, StartTime: u.StartTime}
		if u.EndTime != nil {
			e.EndTime = *u.EndTime
		}
		if u.ResourceChanges != nil {
			e.Changes = *u.ResourceChanges
		}
		out = append(out, e)
	}
	return out, nil
}

// opError turns the engine's errors into the package's, without any secret in them.
func (m *Manager) opError(stack string, err error, secret Secret) error {
	if auto.IsConcurrentUpdateError(err) {
		return &BusyError{Stack: stack}
	}
	if auto.IsSelectStack404Error(err) {
		return fmt.Errorf("%w: %s", ErrUnknownStack, stack)
	}
	return fmt.Errorf("stack %s: %s", stack, scrub(err.Error(), secret))
}

func scrub(s string, secret Secret) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret.Reveal(), "[secret]")
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

// planFile is where a preview through the server saves a stack's plan.
func (m *Manager) planFile(stack string) string {
	return filepath.Join(m.o.StateDir, "plans", stack+".json")
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
	p := policy.Plan{Steps: steps, Adopted: r.Config.Adopt}
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
		o.Progress(Event{Time: time.Now(), Stack: r.Name(), Status: "policy", Message: scrub(msg, r.HFToken)})
	}
	return nil
}
