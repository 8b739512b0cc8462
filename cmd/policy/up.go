package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// up is `pulumi up` with the policies in front of it, for a stack of the project the pulumi CLI
// on PATH runs: it previews the stack, saving the preview's plan and event log, checks the
// policies and the rolls on that preview, and only when they pass applies exactly that plan
// (`pulumi up --plan`: the engine refuses any step the plan does not hold, so what is applied is
// what was checked). It reports whether the check failed; nothing is applied then.
func up(stack, project, allowRoll string, adopted bool, out io.Writer) (bool, error) {
	dir, err := os.MkdirTemp("", "minimax-m3-up-")
	if err != nil {
		return false, err
	}
	// The plan holds the stack's config, secrets encrypted; the directory is the user's only.
	defer func() { _ = os.RemoveAll(dir) }()
	plan, events := filepath.Join(dir, "plan.json"), filepath.Join(dir, "events.json")
	pulumi := func(args ...string) error {
		cmd := exec.Command("pulumi", append(args, "--stack", stack, "--cwd", project, "--non-interactive")...)
		// --event-log is the debug flag the Automation API reads its events from.
		cmd.Env = append(os.Environ(), "PULUMI_DEBUG_COMMANDS=true")
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("pulumi %s: %w", args[0], err)
		}
		return nil
	}
	if err := pulumi("preview", "--save-plan", plan, "--event-log", events); err != nil {
		return false, err
	}
	failed, err := checkEvents(stack, events, project, adopted, allowRoll, out)
	if err != nil || failed {
		if failed {
			_, _ = fmt.Fprintf(out, "policy: %s not applied: the preview above breaks the policies\n", stack)
		}
		return failed, err
	}
	_, _ = fmt.Fprintf(out, "policy: %s passed; applying the checked plan\n", stack)
	return false, pulumi("up", "--plan", plan, "--skip-preview", "--yes")
}
