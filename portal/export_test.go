package portal

import (
	"context"
	"minimax-m3/internal/fakecli"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// FakePulumi puts a Pulumi CLI on PATH that knows no stack: `version` answers, `stack ls` lists
// none (or, with failList, fails), and selecting a stack fails the way the CLI does for a stack
// the backend does not hold. It stands for the backend while an operation's `stack init` has not
// run yet, which the real CLI leaves no way to hold still.
func FakePulumi(t *testing.T, failList bool) *fakecli.CLI {
	list := fakecli.Reply{Args: "stack ls", Stdout: "[]"}
	if failList {
		list = fakecli.Reply{Args: "stack ls", Stderr: "error: could not list stacks", Exit: 255}
	}
	return fakePulumi(t, list)
}

// FakePulumiListFails is FakePulumi whose `stack ls` fails with stderr.
func FakePulumiListFails(t *testing.T, stderr string) {
	fakePulumi(t, fakecli.Reply{Args: "stack ls", Stderr: stderr, Exit: 255})
}

func fakePulumi(t *testing.T, list fakecli.Reply) *fakecli.CLI {
	return fakecli.Install(t, fakecli.Reply{Stderr: "error: no stack named 'x' found", Exit: 255},
		fakecli.Reply{Args: "version", Stdout: "v3.276.0"}, list)
}

// NewTestManager is a Manager of this project with a state directory of the test's own.
func NewTestManager(t *testing.T) *Manager {
	t.Helper()
	return NewTestManagerWith(t, func(*Options) {})
}

// Hold holds stack for op, as an operation does before it creates the stack; release lets go.
func Hold(ctx context.Context, m *Manager, stack, op string) (release func(), err error) {
	_, release, err = m.acquire(ctx, stack, op, false)
	return release, err
}

// FakePulumiStacks is FakePulumi whose backend lists stacks (selecting any of them still fails:
// a test of who may reach which stack needs no stack's state).
func FakePulumiStacks(t *testing.T, stacks ...string) *fakecli.CLI {
	var list []string
	for _, s := range stacks {
		list = append(list, `{"name":"`+s+`"}`)
	}
	return fakePulumi(t, fakecli.Reply{Args: "stack ls", Stdout: "[" + strings.Join(list, ",") + "]"})
}

// NewTestManagerWith is NewTestManager with options changed by set.
func NewTestManagerWith(t *testing.T, set func(*Options)) *Manager {
	t.Helper()
	o := Options{ProjectDir: "..", StateDir: t.TempDir()}
	set(&o)
	m, err := New(o)
	require.NoError(t, err)
	return m
}
