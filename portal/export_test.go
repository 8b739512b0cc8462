package portal

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// FakePulumi puts a Pulumi CLI on PATH that knows no stack: `version` answers, `stack ls` lists
// none (or, with failList, fails), and selecting a stack fails the way the CLI does for a stack
// the backend does not hold. It stands for the backend while an operation's `stack init` has not
// run yet, which the real CLI leaves no way to hold still.
func FakePulumi(t *testing.T, failList bool) {
	t.Helper()
	dir := t.TempDir()
	list := `echo "[]"`
	if failList {
		list = `echo "error: could not list stacks" >&2; exit 255`
	}
	script := `#!/bin/sh
case " $* " in
*" version "*) echo v3.276.0 ;;
*" stack ls "*) ` + list + ` ;;
*) echo "error: no stack named 'x' found" >&2; exit 255 ;;
esac
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pulumi"), []byte(script), 0o755))
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
}

// NewTestManager is a Manager of this project with a state directory of the test's own.
func NewTestManager(t *testing.T) *Manager {
	t.Helper()
	m, err := New(Options{ProjectDir: "..", StateDir: t.TempDir()})
	require.NoError(t, err)
	return m
}

// Hold holds stack for op, as an operation does before it creates the stack; release lets go.
func Hold(ctx context.Context, m *Manager, stack, op string) (release func(), err error) {
	_, release, err = m.acquire(ctx, stack, op, false)
	return release, err
}
