package portal

import (
	"context"
	"minimax-m3/internal/fakecli"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A stack whose first operation holds it but has not created it on the backend yet is listed
// (running; the page's test shows it there without an error), and reading it does not remove the workspace
// directory that operation may be creating it in; no directory of a stack the backend does not
// have outlives the operations and reads of it.
func TestAStackBeingCreatedIsListedAndKept(t *testing.T) {
	FakePulumi(t, false)
	m := NewTestManager(t)
	ctx := context.Background()
	names, err := m.Stacks(ctx)
	require.NoError(t, err)
	assert.Empty(t, names)

	_, release, err := m.acquire(ctx, "agg-new", "up", false)
	require.NoError(t, err)
	names, err = m.Stacks(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"agg-new"}, names)

	assert.Equal(t, "up", m.Running("agg-new"))

	dir := func(stack string) error {
		_, err := os.Stat(filepath.Join(m.o.StateDir, workspace(stack)))
		return err
	}
	_, err = m.Outputs(ctx, "agg-new")
	require.ErrorIs(t, err, ErrUnknownStack)
	require.NoError(t, dir("agg-new"), "a read keeps the directory while an operation holds the stack: it may be creating the stack there")

	release()
	_, err = m.Outputs(ctx, "agg-new")
	require.ErrorIs(t, err, ErrUnknownStack)
	require.ErrorIs(t, dir("agg-new"), os.ErrNotExist, "once nothing holds the stack, the next read of it removes the directory")
	_, err = m.Outputs(ctx, "gone")
	require.ErrorIs(t, err, ErrUnknownStack)
	require.ErrorIs(t, dir("gone"), os.ErrNotExist, "reading a stack nobody runs leaves no directory behind")

	// An operation on a stack the backend does not hold leaves none either: it holds the stack
	// itself, so nothing else is creating it there.
	_, err = m.Refresh(ctx, "gone", RunOptions{})
	require.ErrorIs(t, err, ErrUnknownStack)
	require.ErrorIs(t, dir("gone"), os.ErrNotExist, "an operation on an unknown stack leaves no directory behind")

	// Nor do reads racing such an operation: whichever ends last removes it.
	for range 5 {
		opCtx, release, err := m.acquire(ctx, "ghost", "refresh", false)
		require.NoError(t, err)
		var wg sync.WaitGroup
		for range 6 {
			wg.Go(func() { _, _ = m.Outputs(ctx, "ghost") })
		}
		_, err = m.open(opCtx, "ghost", false)
		require.ErrorIs(t, err, ErrUnknownStack)
		release()
		wg.Wait()
		require.ErrorIs(t, dir("ghost"), os.ErrNotExist, "reads racing an operation on an unknown stack leave no directory behind")
	}

	// An operation may not hold a name a stack cannot have.
	_, _, err = m.acquire(ctx, "../state", "refresh", false)
	require.Error(t, err)
	assert.NotContains(t, m.RunningStacks(), "../state")
}

// A request names only a kubeconfig context the portal's operator listed (Options.Contexts): the
// portal's kubeconfig may reach clusters its users may not. Refused at kubernetes.context before
// the stack is reserved or its workspace written.
func TestARequestNamesOnlyAListedContext(t *testing.T) {
	FakePulumi(t, false)
	ctx := context.Background()
	for _, tc := range []struct {
		allowed []string
		want    string
	}{
		{nil, `kubernetes.context: "admin@prod" is not a context this portal lets requests use (none: leave it empty for the current context of the portal's kubeconfig)`},
		{[]string{"gb200-eu", "gb200-us"}, `kubernetes.context: "admin@prod" is not a context this portal lets requests use (allowed: gb200-eu, gb200-us)`},
	} {
		m, err := New(Options{ProjectDir: "..", StateDir: t.TempDir(), Contexts: tc.allowed})
		require.NoError(t, err)
		r := NewRequest("agg", "agg-team-a")
		r.Config.Namespace.Name, r.HFToken = "team-a", "hf_test"
		r.Config.Kubernetes.Context = "admin@prod"
		_, err = m.Preview(ctx, r, RunOptions{})
		var invalid *InvalidRequestError
		require.ErrorAs(t, err, &invalid)
		assert.Contains(t, err.Error(), tc.want)
		_, statErr := os.Stat(filepath.Join(m.o.StateDir, workspace("agg-team-a")))
		assert.ErrorIs(t, statErr, os.ErrNotExist, "nothing written")
	}
}

// The portal's caps: one operation more than MaxOperations (over all stacks) and one stack more
// than MaxStacks (the backend's stacks, and those being created) are refused with a CapacityError before anything of theirs is written; a stack
// the portal holds already is within the cap.
func TestTheCapsRefuseOneMore(t *testing.T) {
	FakePulumi(t, false)
	ctx := context.Background()
	request := func(stack string) Request {
		r := NewRequest("agg", stack)
		r.Config.Namespace.Name, r.HFToken = "team-a", "hf_test"
		return r
	}
	written := func(m *Manager, stack string) bool {
		_, err := os.Stat(filepath.Join(m.o.StateDir, workspace(stack)))
		return err == nil
	}

	m, err := New(Options{ProjectDir: "..", StateDir: t.TempDir(), MaxOperations: 1})
	require.NoError(t, err)
	release, err := Hold(ctx, m, "agg-team-a", "up")
	require.NoError(t, err)
	_, err = m.Preview(ctx, request("agg-team-b"), RunOptions{})
	require.ErrorIs(t, err, ErrAtCapacity)
	assert.EqualError(t, err, "the portal is at its limit of 1 operations running at once: try again once one ends, or ask its operator to raise the limit")
	assert.False(t, written(m, "agg-team-b"))
	// With Wait, it waits for a place instead.
	waited := make(chan error, 1)
	go func() { _, err := m.Preview(ctx, request("agg-team-b"), RunOptions{Wait: true}); waited <- err }()
	select {
	case err := <-waited:
		t.Fatalf("did not wait for a place: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	release()
	assert.NotErrorIs(t, <-waited, ErrAtCapacity, "ran once the first ended")
	_, err = m.Preview(ctx, request("agg-team-b"), RunOptions{})
	assert.NotErrorIs(t, err, ErrAtCapacity, "room again once the first ended")

	// The backend holds one stack (the fake CLI lists it).
	fakecli.Install(t, fakecli.Reply{Stderr: "error: no stack named 'x' found", Exit: 255},
		fakecli.Reply{Args: "version", Stdout: "v3.276.0"}, fakecli.Reply{Args: "stack ls", Stdout: `[{"name":"agg-team-a"}]`})
	m, err = New(Options{ProjectDir: "..", StateDir: t.TempDir(), MaxStacks: 1})
	require.NoError(t, err)
	_, err = m.Preview(ctx, request("agg-team-b"), RunOptions{})
	require.ErrorIs(t, err, ErrAtCapacity)
	assert.Contains(t, err.Error(), "limit of 1 stacks")
	assert.False(t, written(m, "agg-team-b"))
	_, err = m.Preview(ctx, request("agg-team-a"), RunOptions{})
	assert.NotErrorIs(t, err, ErrAtCapacity, "a stack the portal holds")
}

// The CLI and the provider the portal starts get only what they need of its environment
// (automation.CleanEnviron) and what Options.EnvVars adds: a secret of the portal's host does not
// reach them, for a listing or an operation alike; its tuning of the Go runtime does.
func TestTheCLIGetsACleanEnvironment(t *testing.T) {
	cli := FakePulumi(t, false)
	t.Setenv("PORTAL_HOST_SECRET", "s3cr3t")
	t.Setenv("GITHUB_TOKEN", "ghp_x")
	t.Setenv("PULUMI_CONFIG_PASSPHRASE", "portal-passphrase")
	t.Setenv("KUBECONFIG", "/etc/portal/kubeconfig")
	t.Setenv("GOGC", "250")
	ctx := context.Background()
	m, err := New(Options{ProjectDir: "..", StateDir: t.TempDir(), EnvVars: map[string]string{"AWS_REGION": "eu-west-1"}})
	require.NoError(t, err)
	check := func(what string) {
		env := cli.Env(t)
		assert.NotContains(t, env, "PORTAL_HOST_SECRET", what)
		assert.NotContains(t, env, "GITHUB_TOKEN", what)
		assert.Equal(t, "portal-passphrase", env["PULUMI_CONFIG_PASSPHRASE"], what)
		assert.Equal(t, "/etc/portal/kubeconfig", env["KUBECONFIG"], what)
		assert.Equal(t, "250", env["GOGC"], what+": the host's tuning of the Go runtime")
		assert.Equal(t, "eu-west-1", env["AWS_REGION"], what)
		assert.Equal(t, "file://"+filepath.Join(m.o.StateDir, "state"), env["PULUMI_BACKEND_URL"], what)
		assert.NotEmpty(t, env["PATH"], what)
	}
	_, err = m.Stacks(ctx)
	require.NoError(t, err)
	check("listing")
	cli.Reset(t)
	r := NewRequest("agg", "agg-team-a")
	r.Config.Namespace.Name, r.HFToken = "team-a", "hf_test"
	_, _ = m.Preview(ctx, r, RunOptions{}) // the fake CLI holds no stack: it fails, after running
	require.NotEmpty(t, cli.Calls(t))
	check("an operation")
}

// The portal's registries bind every request: one that widens imageRegistries is refused at that
// key, and an image from elsewhere at its own, before anything is written.
func TestARequestCannotWidenTheRegistries(t *testing.T) {
	FakePulumi(t, false)
	ctx := context.Background()
	m, err := New(Options{ProjectDir: "..", StateDir: t.TempDir(), ImageRegistries: []string{"registry.example.com/mirror"}})
	require.NoError(t, err)
	r := NewRequest("agg", "agg-team-a")
	r.Config.Namespace.Name, r.HFToken = "team-a", "hf_test"
	r.Config.ImageRegistries = []string{"registry.example.com/mirror", "evil.example"}
	r.Config.Image = "evil.example/vllm:1"
	_, err = m.Preview(ctx, r, RunOptions{})
	var invalid *InvalidRequestError
	require.ErrorAs(t, err, &invalid)
	assert.Contains(t, err.Error(), "imageRegistries: is the portal's to set (registry.example.com/mirror), not a request's")
	assert.Contains(t, err.Error(), `image: "evil.example/vllm:1" is not from a registry imageRegistries allows (registry.example.com/mirror)`)
	_, statErr := os.Stat(filepath.Join(m.o.StateDir, workspace("agg-team-a")))
	assert.ErrorIs(t, statErr, os.ErrNotExist, "nothing written")
}

// A base stack file with a key set without --path is refused: the request's checked objects
// replace the base's whole, and such a key would sit beside them, unchecked (a namespace, a
// context or requireRead of the base's instead of the request's).
func TestABaseStackFileKeySetWithoutPathIsRefused(t *testing.T) {
	FakePulumi(t, false)
	dir := t.TempDir()
	for _, f := range []string{"Pulumi.yaml", "Pulumi.disagg.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", f))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), b, 0o644))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.agg.yaml"),
		[]byte("config:\n  minimax-m3:profile: agg\n  minimax-m3:kubernetes.requireRead: \"false\"\n"), 0o644))
	m, err := New(Options{ProjectDir: dir, StateDir: t.TempDir()})
	require.NoError(t, err)
	r := NewRequest("agg", "agg-team-a")
	r.Config.Namespace.Name, r.HFToken = "team-a", "hf_test"
	_, err = m.Preview(context.Background(), r, RunOptions{})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "minimax-m3:kubernetes.requireRead is set without --path")
}
