package portal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/opthistory"

	"minimax-m3/automation"
	"minimax-m3/config"
)

// Stacks lists the stacks on the backend, and those whose first operation here has reserved them
// but not yet created them there: a stack being started shows at once, to every client.
func (m *Manager) Stacks(ctx context.Context) ([]string, error) {
	names, err := m.backendStacks(ctx)
	if err != nil {
		return nil, err
	}
	names = append(names, m.RunningStacks()...)
	slices.Sort(names)
	return slices.Compact(names), nil
}

// backendStacks are the stacks the backend holds.
func (m *Manager) backendStacks(ctx context.Context) ([]string, error) {
	dir := filepath.Join("workspaces", ".list")
	if err := m.writeProjectFile(dir); err != nil {
		return nil, err
	}
	cli, err := automation.CleanCommand()
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
	names := make([]string, 0, len(list))
	for _, s := range list {
		names = append(names, s.Name)
	}
	return names, nil
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
	return OutputsFromMap(out), nil
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

// StackNamespace is the namespace a stack the portal holds deploys into: its settings file's
// namespace.name, else its outputs' namespace; "" for a stack that exists nowhere yet. A stack is
// bound to its namespace: whoever acts on it must be granted that namespace, whatever the stack's
// name (a grant of stacks "team-a*" does not reach team-ab's namespace through "team-ab-prod").
func (m *Manager) StackNamespace(ctx context.Context, stack string) (string, error) {
	if err := CheckStackName(stack); err != nil {
		return "", err
	}
	b, err := m.root.ReadFile(filepath.Join(workspace(stack), "Pulumi."+stack+".yaml"))
	if err == nil {
		plain, _, err := config.StackFileValues(b)
		if err != nil {
			return "", fmt.Errorf("stack %s: its settings file: %w", stack, err)
		}
		if ns := plain[config.Key("namespace.name")]; ns != "" {
			return ns, nil
		}
		var n struct {
			Name string `json:"name"`
		}
		if v := plain[config.Key("namespace")]; v != "" && json.Unmarshal([]byte(v), &n) == nil && n.Name != "" {
			return n.Name, nil
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	out, err := m.Outputs(ctx, stack)
	switch {
	case errors.Is(err, ErrUnknownStack):
		return "", nil
	case err != nil:
		return "", err
	}
	return out.Namespace, nil
}
