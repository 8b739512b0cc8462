// Command prcheck answers a reviewer's question offline: what will this change do to a live stack?
//
// It starts the local API server with the real CRDs, deploys each stack from the BASE commit's
// program and stack files (awaits off, as in `make local`), then previews the head (the working
// tree, uncommitted changes included, or another commit) against that live state through the
// Pulumi CLI with --diff. Per stack it prints the resources and fields that change, whether each
// graph component's pods roll, and the policies' verdict; it fails when a change would replace or
// delete the model cache claim, the namespace or an adopted object, when a policy is broken, or
// when a component rolls that -roll does not name.
//
//	cd tests && go run ./prcheck -base origin/main -roll DecodeWorker
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"minimax-m3/policy"
	"minimax-m3/tests/localcluster"
)

func main() {
	var o options
	flag.StringVar(&o.base, "base", "", "git ref of the deployed program (required)")
	flag.StringVar(&o.head, "head", "", "git ref or directory of the changed program (default: the working tree)")
	flag.StringVar(&o.stacks, "stacks", "agg,disagg", "stacks to check")
	flag.StringVar(&o.roll, "roll", "", "graph components the change is meant to restart (Frontend,Worker,PrefillWorker,DecodeWorker; all)")
	flag.Parse()
	if o.base == "" {
		fmt.Fprintln(os.Stderr, "usage: prcheck -base <git ref> [-head <ref|dir>] [-roll Worker,...] [-stacks agg,disagg]")
		os.Exit(2)
	}
	ok, err := run(context.Background(), o, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "pr-check:", err)
		os.Exit(2)
	}
	if !ok {
		os.Exit(1)
	}
}

type options struct{ base, head, stacks, roll string }

// localConfig is what each stack gets on the local API server besides its stack file: a namespace
// of its own, a placeholder token, and no waits for controllers that do not run here.
func localConfig(stack string) [][2]string {
	return [][2]string{
		{"minimax-m3:namespace.name", "pr-check-" + stack},
		{"minimax-m3:modelDownload.waitForCompletion", "false"},
		{"minimax-m3:readiness.waitForReady", "false"},
	}
}

func run(ctx context.Context, o options, out io.Writer) (bool, error) {
	root, err := repoRoot()
	if err != nil {
		return false, err
	}
	bin := filepath.Join(root, ".toolchain", "bin")
	if err := os.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH")); err != nil {
		return false, err
	}
	work, err := os.MkdirTemp("", "minimax-m3-pr-check")
	if err != nil {
		return false, err
	}
	defer func() { _ = os.RemoveAll(work) }()

	baseDir, baseName, err := checkout(root, o.base, filepath.Join(work, "base"))
	if err != nil {
		return false, err
	}
	headDir, headName := root, "the working tree (uncommitted changes included)"
	if o.head != "" {
		if st, err := os.Stat(o.head); err == nil && st.IsDir() {
			headDir, headName = o.head, o.head
		} else if headDir, headName, err = checkout(root, o.head, filepath.Join(work, "head-src")); err != nil {
			return false, err
		}
	}
	// The head runs from a copy, so nothing is written into the working tree.
	headCopy := filepath.Join(work, "head")
	if err := copyTree(headDir, headCopy); err != nil {
		return false, err
	}
	_, _ = fmt.Fprintf(out, "== base: %s\n== head: %s\n", baseName, headName)

	_, _ = fmt.Fprintln(out, "== starting the local API server with the CRDs from", os.Getenv("MINIMAX_M3_CRDS"))
	cluster, err := localcluster.Start(bin, os.Getenv("MINIMAX_M3_CRDS"))
	if err != nil {
		return false, err
	}
	cluster.StopOnSignal()
	defer func() { _ = cluster.Stop() }()

	env := append(os.Environ(),
		"PULUMI_HOME="+filepath.Join(root, ".toolchain", "pulumi-home"),
		"PULUMI_BACKEND_URL=file://"+filepath.Join(work, "state"),
		"PULUMI_CONFIG_PASSPHRASE=pr-check",
		"PULUMI_SKIP_UPDATE_CHECK=true",
		// --event-log (the engine's events as JSON lines, as the Automation API reads them) is a
		// debug command's flag.
		"PULUMI_DEBUG_COMMANDS=true",
		"KUBECONFIG="+cluster.Kubeconfig,
	)
	if err := os.MkdirAll(filepath.Join(work, "state"), 0o755); err != nil {
		return false, err
	}
	allOK := true
	for _, stack := range strings.Split(o.stacks, ",") {
		ok, err := checkStack(ctx, stackRun{stack: stack, base: baseDir, head: headCopy, work: work, env: env, roll: o.roll}, out)
		if err != nil {
			return false, fmt.Errorf("stack %s: %w", stack, err)
		}
		allOK = allOK && ok
	}
	if allOK {
		_, _ = fmt.Fprintln(out, "\n== pr-check passed")
	} else {
		_, _ = fmt.Fprintln(out, "\n== pr-check FAILED")
	}
	return allOK, nil
}

type stackRun struct {
	stack, base, head, work, roll string
	env                           []string
}

func (s stackRun) pulumi(ctx context.Context, dir string, stdin string, out io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, "pulumi", args...)
	cmd.Dir, cmd.Env, cmd.Stdin = dir, s.env, strings.NewReader(stdin)
	var errBuf bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, io.MultiWriter(out, &errBuf)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pulumi %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// configure sets the local values on a stack file, the token through stdin (never an argument).
func (s stackRun) configure(ctx context.Context, dir string) error {
	for _, kv := range localConfig(s.stack) {
		if err := s.pulumi(ctx, dir, "", io.Discard, "config", "set", "--stack", s.stack, "--path", kv[0], kv[1]); err != nil {
			return err
		}
	}
	return s.pulumi(ctx, dir, "hf_pr_check_placeholder\n", io.Discard, "config", "set", "--stack", s.stack, "--secret", "minimax-m3:hfToken")
}

func checkStack(ctx context.Context, s stackRun, out io.Writer) (bool, error) {
	_, _ = fmt.Fprintf(out, "\n== %s: up from the base program (awaits off)\n", s.stack)
	if err := s.pulumi(ctx, s.base, "", io.Discard, "stack", "init", s.stack); err != nil {
		return false, err
	}
	if err := s.configure(ctx, s.base); err != nil {
		return false, err
	}
	var upLog bytes.Buffer
	if err := s.pulumi(ctx, s.base, "", &upLog, "up", "--stack", s.stack, "--yes", "--skip-preview", "--suppress-progress"); err != nil {
		_, _ = out.Write(upLog.Bytes())
		return false, err
	}
	// The head's stack file decrypts the base's state with the base stack's salt.
	if err := copySalt(filepath.Join(s.base, "Pulumi."+s.stack+".yaml"), filepath.Join(s.head, "Pulumi."+s.stack+".yaml")); err != nil {
		return false, err
	}
	if err := s.configure(ctx, s.head); err != nil {
		return false, err
	}
	_, _ = fmt.Fprintf(out, "\n== %s: preview of the head against it (--diff)\n", s.stack)
	events := filepath.Join(s.work, s.stack+".events")
	if err := s.pulumi(ctx, s.head, "", out, "preview", "--stack", s.stack, "--diff", "--event-log", events); err != nil {
		return false, err
	}
	f, err := os.Open(events)
	if err != nil {
		return false, err
	}
	steps, err := policy.ReadEventLog(f)
	_ = f.Close()
	if err != nil {
		return false, err
	}
	adopted, err := adopts(filepath.Join(s.head, "Pulumi."+s.stack+".yaml"))
	if err != nil {
		return false, err
	}
	return report(out, s.stack, policy.Plan{Steps: steps, Adopted: adopted}, s.roll), nil
}

// report prints what changes, what rolls and the policies' verdict, and says whether it passes.
func report(out io.Writer, stack string, p policy.Plan, roll string) bool {
	_, _ = fmt.Fprintf(out, "\n== %s: summary\n", stack)
	changed := 0
	for _, st := range p.Steps {
		if !st.Changed() || st.Type == "pulumi:pulumi:Stack" || st.Op == "create-replacement" || st.Op == "delete-replaced" {
			continue
		}
		changed++
		fields := ""
		if len(st.Diffs) > 0 {
			fields = ": " + strings.Join(policy.Compact(st.Diffs), ", ")
		}
		_, _ = fmt.Fprintf(out, "  %-8s %s %s%s\n", st.Op, st.Type, st.Name, fields)
	}
	if changed == 0 {
		_, _ = fmt.Fprintln(out, "  no resource changes")
	}
	ok := true
	rolls := policy.Rolls(p)
	for _, line := range policy.Summary(rolls) {
		_, _ = fmt.Fprintln(out, "  "+line)
	}
	meant := strings.Split(roll, ",")
	for _, r := range rolls {
		if r.Rolls && roll != "all" && !slices.Contains(meant, r.Component) {
			ok = false
			_, _ = fmt.Fprintf(out, "  FAIL: %s rolls (%s), and -roll does not name it\n", r.Component, strings.Join(policy.Compact(r.Why), ", "))
		}
	}
	vs := policy.Check(p)
	for _, v := range vs {
		ok = false
		_, _ = fmt.Fprintln(out, "  FAIL: "+v.String())
	}
	if len(vs) == 0 {
		_, _ = fmt.Fprintf(out, "  policies: %d rules, no violations\n", len(policy.Rules))
	}
	return ok
}

func repoRoot() (string, error) {
	b, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("not in the project's git checkout: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// checkout writes the tree of a commit into dir and names it.
func checkout(root, ref, dir string) (string, string, error) {
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

// copyTree copies the program's files (tracked and untracked, not ignored) of a checkout or a
// directory.
func copyTree(from, to string) error {
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

// copySalt gives the head's stack file the passphrase salt the base's stack was created with.
func copySalt(from, to string) error {
	src, err := readYAML(from)
	if err != nil {
		return err
	}
	dst, err := readYAML(to)
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

func readYAML(path string) (map[string]any, error) {
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

// adopts reads `adopt` from a stack file.
func adopts(path string) (bool, error) {
	m, err := readYAML(path)
	if err != nil {
		return false, err
	}
	cfg, _ := m["config"].(map[string]any)
	switch v := cfg["minimax-m3:adopt"].(type) {
	case bool:
		return v, nil
	case string:
		return v == "true", nil
	}
	return false, nil
}
