package portal

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
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
	// Of the portal's own environment they get only automation.CleanEnviron (the CLI's needs:
	// PATH, HOME, PULUMI_*, cloud and proxy settings, KUBECONFIG), never the rest.
	EnvVars map[string]string
	// Contexts are the kubeconfig contexts a request may name in kubernetes.context. Empty: none;
	// every stack uses the kubeconfig's current context. The portal's kubeconfig may reach more
	// clusters than its users may: a request names only the ones the operator of the portal lists.
	Contexts []string
	// ImageRegistries are the registries every request's images must come from (the stacks'
	// imageRegistries, which a request cannot widen); empty: config.DefaultImageRegistries.
	ImageRegistries []string
	// PriorityClasses are the priority classes a request's pods may name (the stacks'
	// priorityClasses, which a request cannot widen); empty: none.
	PriorityClasses []string
	// MaxOperations caps the operations running at once, over all stacks (each starts a Pulumi
	// CLI and a provider); one more is refused with a CapacityError, or with RunOptions.Wait waits
	// for a place. 0: DefaultMaxOperations.
	MaxOperations int
	// MaxStacks caps the stacks the portal holds (one workspace each); an operation that would
	// create one more is refused with a CapacityError. 0: DefaultMaxStacks.
	MaxStacks int
	// Impersonate makes every operation act at the Kubernetes API server as its user
	// (RunOptions.Identity) through the portal's kubeconfig: the portal's identity needs the
	// right to impersonate the users and groups (RBAC verb impersonate), and each team a
	// RoleBinding in its namespaces (package teamboundary). An operation without an identity is
	// refused.
	Impersonate bool
}

// Defaults of Options' caps.
const (
	DefaultMaxOperations = 4
	DefaultMaxStacks     = 64
)

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
	if o.MaxOperations <= 0 {
		o.MaxOperations = DefaultMaxOperations
	}
	if o.MaxStacks <= 0 {
		o.MaxStacks = DefaultMaxStacks
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
	// Identity is who the operation acts for at the API server (Options.Impersonate).
	Identity Identity
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
		if !ok && len(m.running) >= m.o.MaxOperations {
			if !wait {
				m.mu.Unlock()
				return nil, nil, &CapacityError{What: "operations running at once", Limit: m.o.MaxOperations}
			}
			var ends <-chan struct{}
			for _, other := range m.running {
				ends = other.done
				break
			}
			m.mu.Unlock()
			select {
			case <-ctx.Done():
				return nil, nil, ctx.Err()
			case <-ends:
			}
			continue
		}
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
