package automation

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
)

// outputsWorkspace is a stack's LocalWorkspace whose StackOutputs runs the CLI once where the
// Automation API runs it twice.
type outputsWorkspace struct{ auto.Workspace }

// secretSentinel is what `pulumi stack output --json` prints for a secret value.
const secretSentinel = "[secret]"

// StackOutputs returns what auto.LocalWorkspace.StackOutputs returns. That reads the outputs twice,
// plain and with --show-secrets, to learn which are secret; the Automation API does it after every
// up. This reads them plain, and only when one of them is secret also with --show-secrets: a
// stack without secret outputs (this program's) then runs the CLI once less for each up, and with
// a passphrase does not derive its key (a quarter second of CPU) to decrypt nothing.
func (w outputsWorkspace) StackOutputs(ctx context.Context, stack string) (auto.OutputMap, error) {
	plain, err := plainOutputs(ctx, w, stack)
	if err != nil {
		return nil, fmt.Errorf("could not get outputs: %w", err)
	}
	out := auto.OutputMap{}
	for k, v := range plain {
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("could not get outputs: %w", err)
		}
		if strings.Contains(string(raw), secretSentinel) {
			return w.Workspace.StackOutputs(ctx, stack)
		}
		out[k] = auto.OutputValue{Value: v}
	}
	return out, nil
}

// plainOutputs are the stack's outputs as `pulumi stack output --json` prints them: a secret one
// is "[secret]", and nothing is decrypted.
func plainOutputs(ctx context.Context, ws auto.Workspace, stack string) (map[string]any, error) {
	stdout, stderr, _, err := run(ctx, ws, nil, "stack", "output", "--json", "--stack", stack)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, stderr)
	}
	out := map[string]any{}
	if err := json.Unmarshal([]byte(stdout), &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Cancel is auto.Stack.Cancel (`pulumi cancel --yes`), which works only on an
// *auto.LocalWorkspace, not on the workspace that wraps one here.
func (s Stack) Cancel(ctx context.Context) error {
	if _, stderr, _, err := run(ctx, s.Workspace(), nil, "cancel", "--yes", "--stack", s.Name()); err != nil {
		return fmt.Errorf("failed to cancel update: %w: %s", err, stderr)
	}
	return nil
}

// hasProjectFile reports whether dir holds a Pulumi project file.
func hasProjectFile(dir string) bool {
	for _, name := range []string{"Pulumi.yaml", "Pulumi.yml", "Pulumi.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return true
		}
	}
	return false
}

// run runs the workspace's Pulumi CLI in its folder with its environment, as the Automation API's
// own commands run, non-interactive.
func run(ctx context.Context, ws auto.Workspace, stdin io.Reader, args ...string) (stdout, stderr string, code int, err error) {
	var env []string
	if home := ws.PulumiHome(); home != "" {
		env = append(env, "PULUMI_HOME="+home)
	}
	for k, v := range ws.GetEnvVars() {
		env = append(env, k+"="+v)
	}
	return ws.PulumiCommand().Run(ctx, ws.WorkDir(), stdin, nil, nil, env, append(args, "--non-interactive")...)
}
