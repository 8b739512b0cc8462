package automation

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optrefresh"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/pulumi/pulumi/sdk/v3/go/common/tokens"
	"github.com/pulumi/pulumi/sdk/v3/go/common/util/cmdutil"
	"github.com/pulumi/pulumi/sdk/v3/go/common/workspace"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"minimax-m3/components"
	"minimax-m3/config"
)

// ProjectName is the Pulumi project every stack belongs to.
const ProjectName = "minimax-m3"

// Options select a stack and how to run it.
type Options struct {
	// ProjectDir holds Pulumi.yaml and Pulumi.<stack>.yaml. The Automation API writes the stack
	// file (an encryptionsalt, and any Config below), so point it at a working copy, not a checkout
	// you want to keep clean: CopyProject makes one.
	ProjectDir string
	Stack      string
	// Config sets site values before the run, by path (`minimax-m3:namespace.name`), as
	// `pulumi config set --path` does. Mark the token with Secret: true.
	Config auto.ConfigMap
	// EnvVars are passed to the Pulumi CLI and the provider (PULUMI_BACKEND_URL,
	// PULUMI_CONFIG_PASSPHRASE, KUBECONFIG, ...). The program's ownership check reads the cluster
	// with the same KUBECONFIG.
	EnvVars map[string]string
	// Program changes how the program runs (rendering to a directory).
	Program components.Options
	// SecretsProvider is a new stack's secrets provider (passphrase, awskms://…); empty is the
	// backend's default.
	SecretsProvider string
	// CleanEnv runs the CLI (and so the provider) with CleanEnviron plus EnvVars instead of the
	// process's whole environment (CleanCommand).
	CleanEnv bool
}

// Stack is a stack whose operations run the program inline. Before each operation that runs the
// program (preview, up, refresh) it reads the keys the stack's config sets, so that the program
// rejects a key it does not know exactly as `pulumi preview` through the CLI does.
type Stack struct {
	auto.Stack
	keys *configKeys
}

// configKeys is the list of config keys the inline program reads, shared with it.
type configKeys struct {
	mu   sync.Mutex
	keys []string
}

func (k *configKeys) get() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.keys)
}

// NewStack creates or selects the stack and applies Options.Config.
func NewStack(ctx context.Context, o Options) (Stack, error) {
	return stack(ctx, o, auto.UpsertStack)
}

// SelectStack selects an existing stack (an error if it does not exist) and applies Options.Config.
func SelectStack(ctx context.Context, o Options) (Stack, error) {
	return stack(ctx, o, auto.SelectStack)
}

func stack(ctx context.Context, o Options, open func(context.Context, string, auto.Workspace) (auto.Stack, error)) (Stack, error) {
	keys := &configKeys{keys: []string{}}
	programOptions := o.Program
	if programOptions.Kubeconfig == "" {
		programOptions.Kubeconfig = o.EnvVars["KUBECONFIG"]
	}
	program := func(pctx *pulumi.Context) error {
		opts := programOptions
		opts.ConfigKeys = keys.get()
		return components.NewProgram(opts)(pctx)
	}
	wsOpts := []auto.LocalWorkspaceOption{auto.WorkDir(o.ProjectDir), auto.EnvVars(o.EnvVars)}
	var (
		cli auto.PulumiCommand
		err error
	)
	switch {
	case o.CleanEnv:
		cli, err = CleanCommand()
	case !cmdutil.IsTruthy(o.EnvVars[skipVersionCheck]):
		cli, err = PulumiCommand()
	default:
		cli, err = auto.NewPulumiCommand(&auto.PulumiCommandOptions{SkipVersionCheck: true})
	}
	if err != nil {
		return Stack{}, fmt.Errorf("stack %s: %w", o.Stack, err)
	}
	wsOpts = append(wsOpts, auto.Pulumi(inlineCommand{PulumiCommand: cli, program: program}))
	if o.SecretsProvider != "" {
		wsOpts = append(wsOpts, auto.SecretsProvider(o.SecretsProvider))
	}
	if o.ProjectDir == "" || !hasProjectFile(o.ProjectDir) {
		// As the Automation API's inline stacks do without a project file (a new temporary
		// folder, with no ProjectDir): a Go project whose main is the current directory.
		cwd, err := os.Getwd()
		if err != nil {
			return Stack{}, fmt.Errorf("stack %s: %w", o.Stack, err)
		}
		wsOpts = append(wsOpts, auto.Project(workspace.Project{
			Name: tokens.PackageName(ProjectName), Runtime: workspace.NewProjectRuntimeInfo("go", nil), Main: cwd,
		}))
	}
	ws, err := auto.NewLocalWorkspace(ctx, append(wsOpts, auto.Program(program))...)
	if err != nil {
		return Stack{}, fmt.Errorf("stack %s: %w", o.Stack, err)
	}
	s, err := open(ctx, o.Stack, outputsWorkspace{ws})
	if err != nil {
		return Stack{}, fmt.Errorf("stack %s: %w", o.Stack, err)
	}
	plain, secrets := auto.ConfigMap{}, auto.ConfigMap{}
	for k, v := range o.Config {
		if v.Secret {
			secrets[k] = v
		} else {
			plain[k] = v
		}
	}
	if len(plain) > 0 {
		if err := s.SetAllConfigWithOptions(ctx, plain, &auto.ConfigOptions{Path: true}); err != nil {
			return Stack{}, fmt.Errorf("stack %s: setting config: %w", o.Stack, err)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(secrets)) {
		if err := SetSecret(ctx, s, k, secrets[k].Value, true); err != nil {
			return Stack{}, err
		}
	}
	return Stack{Stack: s, keys: keys}, nil
}

// pulumiCLI is the Pulumi CLI on PATH once found and checked.
var pulumiCLI struct {
	mu  sync.Mutex
	cmd auto.PulumiCommand
}

// skipVersionCheck, set in Options.EnvVars, has the stack's workspace skip the CLI's version
// check, as the Automation API does; the stack then does not use PulumiCommand.
const skipVersionCheck = "PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK"

// PulumiCommand is the Pulumi CLI on PATH, its version checked (a `pulumi version` run) the first
// time a stack or workspace opens and shared by every one the process opens after it, instead of
// checked for each (a portal opens one per request): pass it as auto.Pulumi to a workspace of your
// own. A failed check is not kept: the next call checks again.
func PulumiCommand() (auto.PulumiCommand, error) {
	pulumiCLI.mu.Lock()
	defer pulumiCLI.mu.Unlock()
	if pulumiCLI.cmd == nil {
		cmd, err := auto.NewPulumiCommand(nil)
		if err != nil {
			return nil, err
		}
		pulumiCLI.cmd = cmd
	}
	return pulumiCLI.cmd, nil
}

// readKeys hands the program the keys the stack's config sets now: from the stack's settings file
// in its workspace when that file holds all of its config (no CLI run, nothing decrypted), else
// through `pulumi config` (the project's file or an environment adds keys; no settings file).
func (s Stack) readKeys(ctx context.Context) error {
	keys, ok := s.keysFromSettings(ctx)
	if !ok {
		// Keys only: secret values stay encrypted.
		cfg, err := s.Workspace().GetAllConfigWithOptions(ctx, s.Name(), &auto.GetAllConfigOptions{})
		if err != nil {
			return fmt.Errorf("stack %s: reading config: %w", s.Name(), err)
		}
		keys = slices.Sorted(maps.Keys(cfg))
	}
	s.keys.mu.Lock()
	s.keys.keys = keys
	s.keys.mu.Unlock()
	return nil
}

// keysFromSettings lists the keys of the stack's settings file (Pulumi.<stack>.yaml), when no
// other source adds any the program would not read anyway: the project file declares only
// top-level keys (which the program reads whether the stack sets them or not) and the stack imports
// no environment.
func (s Stack) keysFromSettings(ctx context.Context) ([]string, bool) {
	ws := s.Workspace()
	project, err := ws.ProjectSettings(ctx)
	if err != nil {
		return nil, false
	}
	for k := range project.Config {
		if !slices.Contains(config.Keys(), strings.TrimPrefix(k, config.Namespace+":")) {
			return nil, false
		}
	}
	settings, err := ws.StackSettings(ctx, s.Name())
	if err != nil || settings.Environment != nil {
		return nil, false
	}
	keys := make([]string, 0, len(settings.Config))
	for k := range settings.Config {
		keys = append(keys, k.String())
	}
	slices.Sort(keys)
	return keys, true
}

// Preview is auto.Stack.Preview with the stack's current config keys.
func (s Stack) Preview(ctx context.Context, opts ...optpreview.Option) (auto.PreviewResult, error) {
	if err := s.readKeys(ctx); err != nil {
		return auto.PreviewResult{}, err
	}
	return s.Stack.Preview(ctx, opts...)
}

// Up is auto.Stack.Up with the stack's current config keys. Its summary's config keeps secret
// values masked unless opts say optup.ShowSecrets(true) (hiddenSummarySecrets).
func (s Stack) Up(ctx context.Context, opts ...optup.Option) (auto.UpResult, error) {
	if err := s.readKeys(ctx); err != nil {
		return auto.UpResult{}, err
	}
	return s.Stack.Up(ctx, append([]optup.Option{optup.ShowSecrets(false)}, opts...)...)
}

// Refresh is auto.Stack.Refresh with the stack's current config keys. Its summary's config keeps
// secret values masked unless opts say optrefresh.ShowSecrets(true) (hiddenSummarySecrets).
func (s Stack) Refresh(ctx context.Context, opts ...optrefresh.Option) (auto.RefreshResult, error) {
	if err := s.readKeys(ctx); err != nil {
		return auto.RefreshResult{}, err
	}
	return s.Stack.Refresh(ctx, append([]optrefresh.Option{optrefresh.ShowSecrets(false)}, opts...)...)
}

// Destroy is auto.Stack.Destroy. Its summary's config keeps secret values masked unless opts say
// optdestroy.ShowSecrets(true) (hiddenSummarySecrets).
//
// hiddenSummarySecrets: after an operation the Automation API reads its summary back with `pulumi
// stack history`, by default with --show-secrets, which decrypts the stack's secret config (the
// token) into a summary nobody here reads, and with a passphrase stack derives its key once more
// (a quarter second of CPU for each operation).
func (s Stack) Destroy(ctx context.Context, opts ...optdestroy.Option) (auto.DestroyResult, error) {
	return s.Stack.Destroy(ctx, append([]optdestroy.Option{optdestroy.ShowSecrets(false)}, opts...)...)
}

// CopyProject copies the project's Pulumi.yaml and stack files into dir, so runs never rewrite the
// committed files.
func CopyProject(projectDir, dir string) error {
	files, err := filepath.Glob(filepath.Join(projectDir, "Pulumi*.yaml"))
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return fmt.Errorf("no Pulumi.yaml in %s", projectDir)
	}
	for _, f := range files {
		if err := copyFile(f, filepath.Join(dir, filepath.Base(f))); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(to, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// Config reads the stack's config and validates it as the program does.
func (s Stack) Config(ctx context.Context) (config.Config, error) {
	all, err := s.GetAllConfig(ctx)
	if err != nil {
		return config.Config{}, fmt.Errorf("stack %s: reading config: %w", s.Name(), err)
	}
	raw := config.Raw{Values: map[string]string{}, Secrets: map[string]bool{}}
	for full, v := range all {
		if k, ok := strings.CutPrefix(full, config.Namespace+":"); ok {
			raw.Values[k] = v.Value
			raw.Secrets[k] = v.Secret
		}
	}
	c, err := config.Parse(raw)
	if err != nil {
		return c, fmt.Errorf("stack %s: %w", s.Name(), err)
	}
	return c, nil
}

// Restart restarts the graph's pods: it sets restart.id (and restart.strategy, unless empty) in
// the stack's config, as `pulumi config set --path minimax-m3:restart.id <id>` does, and runs `up`,
// which waits for the Dynamo operator to complete the restart.
func (s Stack) Restart(ctx context.Context, id, strategy string, opts ...optup.Option) error {
	if strategy != "" {
		if err := s.SetConfigWithOptions(ctx, config.Key("restart.strategy"), auto.ConfigValue{Value: strategy}, &auto.ConfigOptions{Path: true}); err != nil {
			return fmt.Errorf("stack %s: setting restart.strategy: %w", s.Name(), err)
		}
	}
	if err := s.SetConfigWithOptions(ctx, config.Key("restart.id"), auto.ConfigValue{Value: id}, &auto.ConfigOptions{Path: true}); err != nil {
		return fmt.Errorf("stack %s: setting restart.id: %w", s.Name(), err)
	}
	if _, err := s.Up(ctx, opts...); err != nil {
		return fmt.Errorf("stack %s: up with restart.id=%s: %w", s.Name(), id, err)
	}
	return nil
}

// SetSecret stores a secret config value as `pulumi config set --secret` does, with the value on
// the CLI's standard input: the Automation API's SetConfig passes it as an argument, which every
// process of the host can read in /proc/<pid>/cmdline.
func SetSecret(ctx context.Context, s auto.Stack, key, value string, path bool) error {
	args := []string{"config", "set", "--secret", "--stack", s.Name()}
	if path {
		args = append(args, "--path")
	}
	args = append(args, key)
	_, stderr, _, err := run(ctx, s.Workspace(), strings.NewReader(value), args...)
	if err != nil {
		return fmt.Errorf("stack %s: storing %s as a secret: %v: %s", s.Name(), key, err, strings.ReplaceAll(stderr, value, "[secret]"))
	}
	return nil
}

// PlainOutputs are the stack's outputs as `pulumi stack output --json` prints them: secret outputs
// stay "[secret]", and nothing of the state is decrypted (auto.Stack.Outputs decrypts every secret
// output with --show-secrets).
func PlainOutputs(ctx context.Context, s auto.Stack) (map[string]any, error) {
	out, err := plainOutputs(ctx, s.Workspace(), s.Name())
	if err != nil {
		return nil, fmt.Errorf("stack %s: reading outputs: %w", s.Name(), err)
	}
	return out, nil
}

// PendingOperations are the URNs of the operations an interrupted update left pending in the
// stack's state, read with `pulumi stack export` without --show-secrets (nothing is decrypted).
func PendingOperations(ctx context.Context, s auto.Stack) ([]string, error) {
	stdout, stderr, _, err := run(ctx, s.Workspace(), nil, "stack", "export", "--stack", s.Name())
	if err != nil {
		return nil, fmt.Errorf("stack %s: reading its state: %v: %s", s.Name(), err, stderr)
	}
	var state struct {
		Deployment struct {
			Pending []struct {
				Type     string `json:"type"`
				Resource struct {
					URN string `json:"urn"`
				} `json:"resource"`
			} `json:"pending_operations"`
		} `json:"deployment"`
	}
	if err := json.Unmarshal([]byte(stdout), &state); err != nil {
		return nil, fmt.Errorf("stack %s: reading its state: %w", s.Name(), err)
	}
	var out []string
	for _, p := range state.Deployment.Pending {
		out = append(out, p.Type+" "+p.Resource.URN)
	}
	return out, nil
}
