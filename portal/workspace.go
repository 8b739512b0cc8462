package portal

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	pulumiconfig "github.com/pulumi/pulumi/sdk/v3/go/common/resource/config"
	"gopkg.in/yaml.v3"

	"minimax-m3/automation"
	"minimax-m3/config"
)

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
	env := m.env()
	if id, ok := identityOf(ctx); ok && m.o.Impersonate {
		kubeconfig, err := m.impersonatingKubeconfig(dir, id)
		if err != nil {
			return automation.Stack{}, err
		}
		env["KUBECONFIG"] = kubeconfig
	}
	o := automation.Options{ProjectDir: filepath.Join(m.o.StateDir, dir), Stack: stack, EnvVars: env, SecretsProvider: m.o.SecretsProvider, CleanEnv: true}
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
	plain, _, err := config.StackFileValues(b) // a base stack file's secret is not a value the request may inherit
	if err != nil {
		return nil, fmt.Errorf("base stack file of %s: %w", base, err)
	}
	out := map[string]string{}
	for k, v := range plain {
		if key, ok := strings.CutPrefix(k, config.Namespace+":"); ok {
			if strings.Contains(key, ".") {
				// The request's checked values replace the base's objects whole; a key set without
				// --path would sit beside them, unchecked.
				return nil, fmt.Errorf("base stack file of %s: %s is set without --path: write it as part of its object (pulumi config set --path)", base, k)
			}
			out[key] = v
		}
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
	site, err := r.SiteValues()
	if err != nil {
		return err
	}
	for k, v := range site {
		want[k] = v
	}
	// Secret values stay encrypted: a secret is set again whatever it holds (below), so reading
	// them back (and, on a passphrase stack, deriving its key) buys nothing.
	have, err := s.Workspace().GetAllConfigWithOptions(ctx, s.Name(), &auto.GetAllConfigOptions{})
	if err != nil {
		return err
	}
	// What the stack's own file sets (have also holds the project file's declared defaults,
	// which no stack file removes).
	var own pulumiconfig.Map
	if _, err := os.Stat(filepath.Join(s.Workspace().WorkDir(), "Pulumi."+path.Base(s.Name())+".yaml")); err == nil {
		settings, err := s.Workspace().StackSettings(ctx, s.Name())
		if err != nil {
			return err
		}
		own = settings.Config
	}
	var stale []string
	for key := range own {
		full := key.String()
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
	// A stack the portal runs never skips the ownership and placement checks because the cluster
	// could not be read: it refuses instead (many teams share the cluster).
	r.Config.Kubernetes.RequireRead = true
	// The site's registries, whatever the request says: a request may not widen them.
	widened := append(append(BindRegistries(&r, m.o.ImageRegistries), BindPriorityClasses(&r, m.o.PriorityClasses)...), BindPodSecurity(&r)...)
	stored := false
	if r.HFToken == "" && !r.Config.HuggingFace.ExistingSecret && r.Validate() != nil {
		// The stack may hold the token already. (A request that switches to an existing Secret
		// needs none: configure removes a stored one.)
		stored = m.holdsToken(r.Name())
	}
	ps := append(widened, r.validate(stored)...)
	if c := r.Config.Kubernetes.Context; c != "" && !slices.Contains(m.o.Contexts, c) {
		ps.Add("kubernetes.context", "%q is not a context this portal lets requests use (%s)", c, contextList(m.o.Contexts))
	}
	if len(ps) > 0 {
		return nil, automation.Stack{}, nil, ScrubError(&InvalidRequestError{Problems: ps}, r.HFToken)
	}
	// The base stack file is the site's; one the portal cannot use stops the request before
	// anything runs.
	if _, err := m.baseValues(r.Base); err != nil {
		return nil, automation.Stack{}, nil, err
	}
	ctx, err := m.actingAs(ctx, o)
	if err != nil {
		return nil, automation.Stack{}, nil, err
	}
	ctx, release, err := m.acquire(ctx, r.Name(), op, o.Wait)
	if err != nil {
		return nil, automation.Stack{}, nil, err
	}
	if err := m.roomFor(ctx, r.Name()); err != nil {
		release()
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

// imageRegistries are the registries every request's images must come from.
func (m *Manager) imageRegistries() []string { return SiteRegistries(m.o.ImageRegistries) }

// roomFor refuses a stack the backend does not hold yet when the portal holds Options.MaxStacks:
// the backend's stacks and those other operations are creating. A destroy that removes its stack
// (Destroy's removeStack) frees a place.
func (m *Manager) roomFor(ctx context.Context, stack string) error {
	backend, err := m.backendStacks(ctx)
	if err != nil {
		return fmt.Errorf("counting the stacks against the portal's limit: %w", err)
	}
	if slices.Contains(backend, stack) {
		return nil
	}
	held := map[string]bool{}
	for _, n := range append(backend, m.RunningStacks()...) {
		held[n] = true
	}
	delete(held, stack)
	if len(held) >= m.o.MaxStacks {
		return &CapacityError{What: "stacks", Limit: m.o.MaxStacks}
	}
	return nil
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

func contextList(cs []string) string {
	if len(cs) == 0 {
		return "none: leave it empty for the current context of the portal's kubeconfig"
	}
	return "allowed: " + strings.Join(cs, ", ")
}
