package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"minimax-m3/policy"
	"minimax-m3/tests/framework/gogc"
	"minimax-m3/tests/framework/localcluster"
	"minimax-m3/tests/framework/localstack"
)

func main() {
	var o options
	// A flag set of its own: a dependency registers -kubeconfig on the global one.
	flags := flag.NewFlagSet("prcheck", flag.ExitOnError)
	flags.StringVar(&o.base, "base", "", "git ref of the deployed program (required)")
	flags.StringVar(&o.head, "head", "", "git ref or directory of the changed program (default: the working tree)")
	flags.StringVar(&o.stacks, "stacks", "agg,disagg", "stacks to check")
	flags.StringVar(&o.roll, "roll", "", "graph components the change is meant to restart (Frontend,Worker,PrefillWorker,DecodeWorker; all)")
	flags.StringVar(&o.kubeconfig, "kubeconfig", "", "a running cluster to check on (default: start a local API server)")
	flags.StringVar(&o.prefix, "namespace-prefix", "local-", "the stacks' namespaces are this prefix and the stack's name")
	_ = flags.Parse(os.Args[1:])
	if o.base == "" {
		fmt.Fprintln(os.Stderr, "usage: prcheck -base <git ref> [-head <ref|dir>] [-roll Worker,...] [-stacks agg,disagg] [-kubeconfig <file> -namespace-prefix <prefix>]")
		os.Exit(2)
	}
	if err := o.check(); err != nil {
		fmt.Fprintln(os.Stderr, "pr-check:", err)
		os.Exit(2)
	}
	// Its previews, builds and local API server collect garbage less often: CPU is what a check
	// waits on.
	if err := gogc.Raise(); err != nil {
		fmt.Fprintln(os.Stderr, "pr-check:", err)
		os.Exit(1)
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

type options struct{ base, head, stacks, roll, kubeconfig, prefix string }

// check refuses flags the check cannot use, before anything starts. The kubeconfig becomes an
// absolute path: the CLI and the provider run in other folders than this process.
func (o *options) check() error {
	if o.prefix == "" || !regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*)?$`).MatchString(o.prefix) {
		return fmt.Errorf("-namespace-prefix %q: must start a namespace name (lower-case letters, digits and '-')", o.prefix)
	}
	if o.kubeconfig != "" {
		abs, err := filepath.Abs(o.kubeconfig)
		if err != nil {
			return fmt.Errorf("-kubeconfig: %w", err)
		}
		if _, err := os.Stat(abs); err != nil {
			return fmt.Errorf("-kubeconfig: %w", err)
		}
		o.kubeconfig = abs
	}
	return nil
}

func run(ctx context.Context, o options, out io.Writer) (bool, error) {
	root, err := localstack.RepoRoot()
	if err != nil {
		return false, err
	}
	work, err := os.MkdirTemp("", "minimax-m3-pr-check")
	if err != nil {
		return false, err
	}
	defer func() { _ = os.RemoveAll(work) }()

	baseDir, baseName, err := localstack.Checkout(root, o.base, filepath.Join(work, "base"))
	if err != nil {
		return false, err
	}
	headDir, headName := root, "the working tree (uncommitted changes included)"
	if o.head != "" {
		if st, err := os.Stat(o.head); err == nil && st.IsDir() {
			headDir, headName = o.head, o.head
		} else if headDir, headName, err = localstack.Checkout(root, o.head, filepath.Join(work, "head-src")); err != nil {
			return false, err
		}
	}
	// The head runs from a copy, so nothing is written into the working tree.
	headCopy := filepath.Join(work, "head")
	if err := localstack.CopyProgram(headDir, headCopy); err != nil {
		return false, err
	}
	_, _ = fmt.Fprintf(out, "== base: %s\n== head: %s\n", baseName, headName)

	kubeconfig := o.kubeconfig
	if kubeconfig == "" {
		_, _ = fmt.Fprintln(out, "== starting the local API server with the CRDs from", os.Getenv("MINIMAX_M3_CRDS"))
		cluster, err := localcluster.Start(filepath.Join(root, ".toolchain", "bin"), os.Getenv("MINIMAX_M3_CRDS"))
		if err != nil {
			return false, err
		}
		cluster.StopOnSignal()
		defer func() { _ = cluster.Stop() }()
		kubeconfig = cluster.Kubeconfig
	}

	cli, err := localstack.NewCLI(root, filepath.Join(work, "state"), kubeconfig)
	if err != nil {
		return false, err
	}
	cli.NamespacePrefix = o.prefix
	// Each checkout is a new folder, and without -trimpath Go's build cache keys the program's
	// packages by their folder: with it, a commit's packages compile once, not once per checkout.
	// Added to the user's flags, from the environment or `go env -w`.
	goflags, err := exec.CommandContext(ctx, "go", "env", "GOFLAGS").Output()
	if err != nil {
		return false, fmt.Errorf("go env GOFLAGS: %w", err)
	}
	flags := strings.Fields(string(goflags))
	if !slices.Contains(flags, "-trimpath") {
		flags = append(flags, "-trimpath")
	}
	cli.Env = append(cli.Env, "GOFLAGS="+strings.Join(flags, " "))
	if o.kubeconfig != "" {
		if err := namespacesAreFree(ctx, cli, strings.Split(o.stacks, ",")); err != nil {
			return false, err
		}
		_, _ = fmt.Fprintln(out, "== on the cluster of", o.kubeconfig)
	}
	allOK := true
	for _, stack := range strings.Split(o.stacks, ",") {
		ok, err := checkStack(ctx, stackRun{cli: cli, stack: stack, base: baseDir, head: headCopy, work: work, roll: o.roll}, out)
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

// namespacesAreFree refuses a cluster where a stack's namespace exists: the check creates its
// namespaces and touches nothing it did not create.
func namespacesAreFree(ctx context.Context, cli localstack.CLI, stacks []string) error {
	for _, stack := range stacks {
		ns := cli.Namespace(stack)
		cmd := exec.CommandContext(ctx, "kubectl", "get", "namespace", ns, "--ignore-not-found", "-o", "name")
		cmd.Env = cli.Env
		var stderr strings.Builder
		cmd.Stderr = &stderr // a warning there (API discovery, say) is not a namespace
		b, err := cmd.Output()
		if err != nil {
			return fmt.Errorf("kubectl get namespace %s: %w: %s", ns, err, stderr.String())
		}
		if len(strings.TrimSpace(string(b))) > 0 {
			return fmt.Errorf("-namespace-prefix: namespace %s exists in that cluster; the check deploys only into namespaces it creates", ns)
		}
	}
	return nil
}

type stackRun struct {
	cli                           localstack.CLI
	stack, base, head, work, roll string
}

func checkStack(ctx context.Context, s stackRun, out io.Writer) (bool, error) {
	_, _ = fmt.Fprintf(out, "\n== %s: up from the base program (awaits off)\n", s.stack)
	if err := s.cli.Deploy(ctx, s.base, s.stack, out); err != nil {
		return false, err
	}
	// The head's stack file decrypts the base's state with the base stack's salt.
	if err := localstack.CopySalt(filepath.Join(s.base, "Pulumi."+s.stack+".yaml"), filepath.Join(s.head, "Pulumi."+s.stack+".yaml")); err != nil {
		return false, err
	}
	if err := s.cli.Configure(ctx, s.head, s.stack); err != nil {
		return false, err
	}
	_, _ = fmt.Fprintf(out, "\n== %s: preview of the head against it (--diff)\n", s.stack)
	events := filepath.Join(s.work, s.stack+".events")
	if err := s.cli.Run(ctx, s.head, "", out, "preview", "--stack", s.stack, "--diff", "--event-log", events); err != nil {
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
	adopted, err := policy.StackFileAdopts(filepath.Join(s.head, "Pulumi."+s.stack+".yaml"))
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
	for _, r := range policy.UnexpectedRolls(rolls, roll) {
		ok = false
		_, _ = fmt.Fprintf(out, "  FAIL: %s rolls (%s), and -roll does not name it\n", r.Component, strings.Join(policy.Compact(r.Why), ", "))
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
