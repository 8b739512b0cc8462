package localstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"
)

// CLI runs the Pulumi CLI with one environment.
type CLI struct {
	Env []string
	// NamespacePrefix goes before a stack's name to make its namespace; "local-" when empty.
	NamespacePrefix string
}

// NewCLI is the environment of the built toolchain (root/.toolchain), a file backend in stateDir
// and the cluster of kubeconfig. It puts the toolchain first on this process's PATH too.
func NewCLI(root, stateDir, kubeconfig string) (CLI, error) {
	bin := filepath.Join(root, ".toolchain", "bin")
	if err := os.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH")); err != nil {
		return CLI{}, err
	}
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return CLI{}, err
	}
	return CLI{Env: append(os.Environ(),
		"PULUMI_HOME="+filepath.Join(root, ".toolchain", "pulumi-home"),
		"PULUMI_BACKEND_URL=file://"+stateDir,
		"PULUMI_CONFIG_PASSPHRASE=local",
		"PULUMI_SKIP_UPDATE_CHECK=true",
		// --event-log (the engine's events as JSON lines, as the Automation API reads them) is a
		// debug command's flag.
		"PULUMI_DEBUG_COMMANDS=true",
		"KUBECONFIG="+kubeconfig,
	)}, nil
}

// Run runs `pulumi args...` in dir with stdin, its output to out.
func (c CLI) Run(ctx context.Context, dir, stdin string, out io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, "pulumi", args...)
	cmd.Dir, cmd.Env, cmd.Stdin = dir, c.Env, strings.NewReader(stdin)
	var errBuf bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, io.MultiWriter(out, &errBuf)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pulumi %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errBuf.String()))
	}
	return nil
}

// Configure sets what a stack needs on the local API server besides its stack file: its own
// namespace, a placeholder token (through stdin, never an argument) and no waits for the
// controllers that do not run there.
func (c CLI) Configure(ctx context.Context, dir, stack string) error {
	// One CLI run for the plain values (each run costs the CLI's start), one for the token.
	err := c.Run(ctx, dir, "", io.Discard, "config", "set-all", "--stack", stack, "--path",
		"--plaintext", "minimax-m3:namespace.name="+c.Namespace(stack),
		"--plaintext", "minimax-m3:modelDownload.waitForCompletion=false",
		"--plaintext", "minimax-m3:readiness.waitForReady=false")
	if err != nil {
		return err
	}
	return c.Run(ctx, dir, "hf_local_placeholder\n", io.Discard, "config", "set", "--stack", stack, "--secret", "minimax-m3:hfToken")
}

// Namespace is where a stack deploys on the local API server.
func Namespace(stack string) string { return CLI{}.Namespace(stack) }

// Namespace is where this CLI's stack deploys.
func (c CLI) Namespace(stack string) string {
	if c.NamespacePrefix == "" {
		return "local-" + stack
	}
	return c.NamespacePrefix + stack
}

// Deploy creates the stack in dir's program, configures it and runs `pulumi up`; the engine's
// output goes to out only when it fails.
func (c CLI) Deploy(ctx context.Context, dir, stack string, out io.Writer) error {
	if err := c.Run(ctx, dir, "", io.Discard, "stack", "init", stack); err != nil {
		return err
	}
	if err := c.Configure(ctx, dir, stack); err != nil {
		return err
	}
	var log bytes.Buffer
	if err := c.Run(ctx, dir, "", &log, "up", "--stack", stack, "--yes", "--skip-preview", "--suppress-progress"); err != nil {
		_, _ = out.Write(log.Bytes())
		return err
	}
	return nil
}

// Checkout writes the tree of a commit into dir and names it.
func Checkout(root, ref, dir string) (string, string, error) {
	b, err := exec.Command("git", "-C", root, "log", "-1", "--format=%h %s", ref+"^{commit}", "--").Output()
	if err != nil {
		return "", "", fmt.Errorf("%s is not a commit of %s", ref, root)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", ref+"^{commit}")
	extract := exec.Command("tar", "-x", "-C", dir)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return "", "", err
	}
	extract.Stdin = pipe
	if err := extract.Start(); err != nil {
		return "", "", err
	}
	if err := errors.Join(archive.Run(), extract.Wait()); err != nil {
		return "", "", fmt.Errorf("extracting %s: %w", ref, err)
	}
	return dir, strings.TrimSpace(string(b)), nil
}

// CopyProgram copies the program's files (tracked and untracked, not ignored) of a checkout or a
// directory.
func CopyProgram(from, to string) error {
	var files []string
	if b, err := exec.Command("git", "-C", from, "ls-files", "-co", "--exclude-standard", "-z").Output(); err == nil && len(b) > 0 {
		files = strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	} else {
		err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(from, p)
			files = append(files, rel)
			return nil
		})
		if err != nil {
			return err
		}
	}
	for _, f := range files {
		if strings.HasPrefix(f, "tests/") || strings.HasPrefix(f, ".toolchain/") {
			continue // not part of the program
		}
		b, err := os.ReadFile(filepath.Join(from, f))
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the working tree
		} else if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(to, f)), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(to, f), b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// CopySalt gives the head's stack file the passphrase salt the base's stack was created with.
func CopySalt(from, to string) error {
	src, err := ReadYAML(from)
	if err != nil {
		return err
	}
	dst, err := ReadYAML(to)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if dst == nil {
		dst = map[string]any{}
	}
	dst["encryptionsalt"] = src["encryptionsalt"]
	b, err := yaml.Marshal(dst)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}

func ReadYAML(path string) (map[string]any, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := yaml.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// RepoRoot is the top of the git checkout the command runs in.
func RepoRoot() (string, error) {
	b, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("not in the project's git checkout: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}
