package automation

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
)

// What a Pulumi CLI started by CleanCommand inherits of the environment of the process that starts
// it: what the CLI, its plugins and the provider need to run and to reach a backend, a secrets
// provider, a proxy and a cluster, and how the host tunes the Go runtime of each (GOGC,
// GOMEMLIMIT, GOMAXPROCS: the CLI, the language host and the provider are Go programs).
// Everything else (a service's own tokens and secrets, whatever its host sets) is left out; what
// a stack needs beyond it goes in Options.EnvVars.
var (
	inheritedVars = []string{"PATH", "HOME", "USER", "LOGNAME", "TMPDIR", "TZ", "LANG", "KUBECONFIG",
		"KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", // in a pod, the in-cluster config
		"SSL_CERT_FILE", "SSL_CERT_DIR", "HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy",
		"GOGC", "GOMEMLIMIT", "GOMAXPROCS"}
	inheritedPrefixes = []string{"LC_", "XDG_", "PULUMI_", "AWS_", "GOOGLE_", "CLOUDSDK_", "AZURE_", "ARM_", "AAD_", "VAULT_"}
)

// CleanEnviron is the part of the process's environment a CLI started by CleanCommand inherits.
func CleanEnviron() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if slices.Contains(inheritedVars, k) || slices.ContainsFunc(inheritedPrefixes, func(p string) bool { return strings.HasPrefix(k, p) }) {
			env = append(env, kv)
		}
	}
	return env
}

// CleanCommand is the Pulumi CLI on PATH (PulumiCommand, its version checked once), run with
// CleanEnviron plus what each workspace adds (auto.EnvVars) instead of the whole environment of
// the process, which the Automation API's own command passes on to the CLI and so to every
// plugin and provider. A service that runs stacks for others (the portal) uses it, so that none of
// its own secrets reaches them.
func CleanCommand() (auto.PulumiCommand, error) {
	cli, err := PulumiCommand()
	if err != nil {
		return nil, err
	}
	path, err := exec.LookPath("pulumi")
	if err != nil {
		return nil, err
	}
	if abs, err := filepath.Abs(path); err == nil {
		path = abs
	}
	return cleanCommand{PulumiCommand: cli, path: path}, nil
}

type cleanCommand struct {
	auto.PulumiCommand
	path string
}

// Run runs the CLI as the Automation API does (non-interactive, interrupted on cancel and killed
// 10 s later, the exit code returned), with the clean environment.
func (c cleanCommand) Run(ctx context.Context, workdir string, stdin io.Reader, additionalOutput, additionalErrorOutput []io.Writer,
	additionalEnv []string, args ...string) (string, string, int, error) {
	flags := args
	if i := slices.Index(args, "--"); i >= 0 {
		flags = args[:i]
	}
	if !slices.Contains(flags, "--non-interactive") {
		args = append([]string{"--non-interactive"}, args...)
	}
	cmd := exec.CommandContext(ctx, c.path, args...)
	cmd.Dir = workdir
	env := append(CleanEnviron(), additionalEnv...)
	// The CLI's own folder first, where its plugins are, as the Automation API does.
	for i, kv := range env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			env[i] = "PATH=" + filepath.Dir(c.path) + string(os.PathListSeparator) + p
		}
	}
	cmd.Env = append(env, "PULUMI_AUTOMATION_API=true")
	var stdout, stderr bytes.Buffer
	cmd.Stdout = io.MultiWriter(append(additionalOutput, &stdout)...)
	cmd.Stderr = io.MultiWriter(append(additionalErrorOutput, &stderr)...)
	cmd.Stdin = stdin
	cmd.Cancel = func() error {
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			_ = cmd.Process.Kill()
		}
		return nil
	}
	cmd.WaitDelay = 10 * time.Second
	code := -2 // the Automation API's unknown exit code
	err := cmd.Run()
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else if err == nil {
		code = 0
	}
	return stdout.String(), stderr.String(), code, err
}
