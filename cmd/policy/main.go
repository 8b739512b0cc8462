package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"minimax-m3/automation"
	"minimax-m3/config"
	"minimax-m3/policy"
)

type stacks []string

func (s *stacks) String() string     { return strings.Join(*s, ",") }
func (s *stacks) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	var names stacks
	flag.Var(&names, "stack", "stack to render and check (repeatable; default agg and disagg)")
	eventLog := flag.String("events", "", "check the steps of this `pulumi preview --event-log` file instead")
	allowRoll := flag.String("allow-roll", "", "with -events: graph components the change may restart (Frontend,Worker,PrefillWorker,DecodeWorker; all); any other that rolls fails the check")
	adopted := flag.Bool("adopted", false, "with -events: the stack has adopt=true, which protects every object from replacement (default: read from Pulumi.<stack>.yaml when -stack is given)")
	apply := flag.Bool("up", false, "preview -stack through the pulumi CLI, check that preview, and when it passes apply exactly its plan (pulumi up --plan)")
	project := flag.String("project", ".", "the project directory")
	list := flag.Bool("list", false, "list the rules and exit")
	flag.Func("image-registries", "the registries (or repository prefixes) images may come from, comma-separated (default: the recipe's, "+
		strings.Join(config.DefaultImageRegistries, ",")+"; never read from a stack file a change could edit)", func(v string) error {
		imageRegistries = strings.Split(v, ",")
		return nil
	})
	flag.Func("priority-classes", "the priority classes pods may name, comma-separated (default: none; never read from a stack file a change could edit)", func(v string) error {
		priorityClasses = strings.Split(v, ",")
		return nil
	})
	set := auto.ConfigMap{}
	flag.Func("set", "config value by path for the render, key=value (repeatable)", func(v string) error {
		k, val, ok := strings.Cut(v, "=")
		if !ok {
			return fmt.Errorf("%q is not key=value", v)
		}
		set[k] = auto.ConfigValue{Value: val}
		return nil
	})
	flag.Parse()
	if *list {
		for _, r := range policy.Rules {
			fmt.Printf("%-30s %s\n", r.Name, r.Description)
		}
		return
	}
	var failed bool
	var err error
	if *apply {
		if len(names) != 1 || *eventLog != "" || len(set) > 0 {
			fmt.Fprintln(os.Stderr, "policy: -up takes exactly one -stack, and neither -events nor -set")
			os.Exit(2)
		}
		failed, err = up(names[0], *project, *allowRoll, *adopted, os.Stdout)
	} else {
		failed, err = run(names, *eventLog, *adopted, *allowRoll, *project, set, os.Stdout)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "policy:", err)
		os.Exit(2)
	}
	if failed {
		os.Exit(1)
	}
}

// imageRegistries is -image-registries: the site's list for rule allowed-registries.
var imageRegistries []string

// priorityClasses is -priority-classes: the site's list for rule pod-security.
var priorityClasses []string

func run(names stacks, eventLog string, adopted bool, allowRoll, project string, set auto.ConfigMap, out io.Writer) (bool, error) {
	if eventLog != "" {
		stack := ""
		if len(names) == 1 {
			stack = names[0]
		}
		return checkEvents(stack, eventLog, project, adopted, allowRoll, out)
	}
	if len(names) == 0 {
		names = stacks{"agg", "disagg"}
	}
	failed := false
	for _, stack := range names {
		dir, err := os.MkdirTemp("", "minimax-m3-policy-"+stack)
		if err != nil {
			return false, err
		}
		var steps []policy.Step
		err = automation.Render(context.Background(), automation.RenderOptions{
			ProjectDir: project, Stack: stack, OutDir: dir, Config: set, Steps: &steps,
		})
		_ = os.RemoveAll(dir)
		if err != nil {
			return false, err
		}
		if report(out, "stack "+stack, policy.Plan{Steps: steps, ImageRegistries: imageRegistries, PriorityClasses: priorityClasses}) {
			failed = true
		}
	}
	return failed, nil
}

// checkEvents checks the steps of a preview's event log: the rules, and a roll of each graph
// component allowRoll does not name. With a stack, whether it adopts is read from its stack file.
func checkEvents(stack, eventLog, project string, adopted bool, allowRoll string, out io.Writer) (bool, error) {
	f, err := os.Open(eventLog)
	if err != nil {
		return false, err
	}
	defer func() { _ = f.Close() }()
	steps, err := policy.ReadEventLog(f)
	if err != nil {
		return false, err
	}
	if stack != "" && !adopted {
		if adopted, err = policy.StackFileAdopts(filepath.Join(project, "Pulumi."+stack+".yaml")); err != nil {
			return false, err
		}
	}
	p := policy.Plan{Steps: steps, Adopted: adopted, ImageRegistries: imageRegistries, PriorityClasses: priorityClasses}
	rolls := policy.Rolls(p)
	for _, line := range policy.Summary(rolls) {
		_, _ = fmt.Fprintln(out, line)
	}
	failed := report(out, eventLog, p)
	for _, r := range policy.UnexpectedRolls(rolls, allowRoll) {
		failed = true
		_, _ = fmt.Fprintf(out, "FAIL: %s rolls (%s), and -allow-roll does not name it (a pull request allows it with the label allow-worker-roll)\n",
			r.Component, strings.Join(policy.Compact(r.Why), ", "))
	}
	return failed, nil
}

// report prints the violations of a plan and reports whether there were any.
func report(out io.Writer, what string, p policy.Plan) bool {
	vs := policy.Check(p)
	if len(vs) == 0 {
		_, _ = fmt.Fprintf(out, "%s: %d rules, %d resources, no violations\n", what, len(policy.Rules), len(p.Steps))
		return false
	}
	_, _ = fmt.Fprintf(out, "%s: %d violations\n", what, len(vs))
	for _, v := range vs {
		_, _ = fmt.Fprintln(out, "  "+v.String())
	}
	return true
}
