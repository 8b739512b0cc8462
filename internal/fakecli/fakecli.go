package fakecli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Reply is what the fake CLI answers to a call whose arguments contain Args (whole words, in
// order, as `case " $* " in *" Args "*)` matches them).
type Reply struct {
	Args           string
	Stdout, Stderr string
	Exit           int
}

// CLI is a fake `pulumi` on PATH for one test.
type CLI struct{ log string }

// Install puts a fake `pulumi` first on PATH for the rest of the test: it appends each call's
// arguments to a log and answers with the first reply whose Args the call contains, else with
// otherwise.
func Install(t testing.TB, otherwise Reply, replies ...Reply) *CLI {
	t.Helper()
	dir := t.TempDir()
	c := &CLI{log: filepath.Join(dir, "calls")}
	var b strings.Builder
	fmt.Fprintf(&b, "#!/bin/sh\necho \"$*\" >> %s\nenv > %s\ncase \" $* \" in\n", quote(c.log), quote(c.log+".env"))
	for _, r := range replies {
		fmt.Fprintf(&b, "*%s*) %s ;;\n", quote(" "+r.Args+" "), answer(r))
	}
	fmt.Fprintf(&b, "*) %s ;;\nesac\n", answer(otherwise))
	if err := os.WriteFile(filepath.Join(dir, "pulumi"), []byte(b.String()), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return c
}

// Calls are the arguments of every call so far, one string per call.
func (c *CLI) Calls(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile(c.log)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func answer(r Reply) string {
	var s []string
	if r.Stdout != "" {
		s = append(s, "printf '%s\\n' "+quote(r.Stdout))
	}
	if r.Stderr != "" {
		s = append(s, "printf '%s\\n' "+quote(r.Stderr)+" >&2")
	}
	return strings.Join(append(s, fmt.Sprintf("exit %d", r.Exit)), "; ")
}

// quote is s as one single-quoted shell word.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// Env is the environment the last call ran with.
func (c *CLI) Env(t testing.TB) map[string]string {
	t.Helper()
	b, err := os.ReadFile(c.log + ".env")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// Reset forgets the calls so far.
func (c *CLI) Reset(t testing.TB) {
	t.Helper()
	if err := os.Remove(c.log); err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
}
