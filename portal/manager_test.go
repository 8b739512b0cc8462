package portal

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Pulumi CLI on PATH that knows no stack: `version` answers, `stack ls` lists none (or, with
// failList, fails), and selecting a stack fails the way the CLI does for a stack the backend
// does not hold. It stands for the backend while an operation's `stack init` has not run yet,
// which the real CLI leaves no way to hold still.
func fakePulumi(t *testing.T, failList bool) {
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

func newTestManager(t *testing.T) *Manager {
	t.Helper()
	m, err := New(Options{ProjectDir: "..", StateDir: t.TempDir()})
	require.NoError(t, err)
	return m
}

const testBearer = "a-bearer-of-sixteen-or-more"

func getPage(t *testing.T, m *Manager) (int, string) {
	t.Helper()
	srv, err := NewServer(t.Context(), m, testBearer)
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("Authorization", "Bearer "+testBearer)
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	b, err := io.ReadAll(rec.Body)
	require.NoError(t, err)
	return rec.Code, string(b)
}

// A stack whose first operation holds it but has not created it on the backend yet is listed and
// shown on the page (running, without an error), and reading it does not remove the workspace
// directory that operation may be creating it in; no directory of a stack the backend does not
// have outlives the operations and reads of it.
func TestAStackBeingCreatedIsListedAndKept(t *testing.T) {
	fakePulumi(t, false)
	m := newTestManager(t)
	ctx := context.Background()
	names, err := m.Stacks(ctx)
	require.NoError(t, err)
	assert.Empty(t, names)

	_, release, err := m.acquire(ctx, "agg-new", "up", false)
	require.NoError(t, err)
	names, err = m.Stacks(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"agg-new"}, names)

	code, page := getPage(t, m)
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, page, `data-stack="agg-new"`)
	assert.Contains(t, page, `agg-new <span class="running">(up running)</span>`)
	assert.NotContains(t, page, `class="failed"`, "a stack being created has no state yet: no error")

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

// When the backend cannot list its stacks, the page still shows what runs here, with the error
// (503: the body is the page).
func TestThePageShowsRunningStacksWhenListingFails(t *testing.T) {
	fakePulumi(t, true)
	m := newTestManager(t)
	_, release, err := m.acquire(context.Background(), "agg-busy", "up", false)
	require.NoError(t, err)
	_, err = m.Stacks(context.Background())
	require.Error(t, err)

	code, page := getPage(t, m)
	assert.Equal(t, http.StatusServiceUnavailable, code, "a monitor of the page sees the failure")
	assert.Contains(t, page, `id="list-error">listing the stacks failed:`)
	assert.Contains(t, page, `data-stack="agg-busy"`)
	release()

	_, page = getPage(t, m)
	assert.Contains(t, page, `id="list-error">listing the stacks failed:`)
	assert.NotContains(t, page, "No stacks yet", "a failed listing is not an empty one")
}
