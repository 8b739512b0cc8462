package portal

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
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
// directory that operation is creating it in.
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

	_, err = m.Outputs(ctx, "agg-new")
	require.ErrorIs(t, err, ErrUnknownStack)
	_, err = os.Stat(filepath.Join(m.o.StateDir, workspace("agg-new"), "Pulumi.yaml"))
	require.NoError(t, err, "the running operation's workspace stays")

	release()
	_, err = m.Outputs(ctx, "agg-new")
	require.ErrorIs(t, err, ErrUnknownStack)
	_, err = os.Stat(filepath.Join(m.o.StateDir, workspace("gone")))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = m.Outputs(ctx, "gone")
	require.ErrorIs(t, err, ErrUnknownStack)
	_, err = os.Stat(filepath.Join(m.o.StateDir, workspace("gone")))
	require.ErrorIs(t, err, os.ErrNotExist, "reading a stack nobody runs leaves no directory behind")

	// An operation on a stack the backend does not hold leaves none either: it holds the stack
	// itself, so nothing else is creating it there.
	_, err = m.Refresh(ctx, "gone", RunOptions{})
	require.ErrorIs(t, err, ErrUnknownStack)
	_, err = os.Stat(filepath.Join(m.o.StateDir, workspace("gone")))
	require.ErrorIs(t, err, os.ErrNotExist, "an operation on an unknown stack leaves no directory behind")
}

// When the backend cannot list its stacks, the page still shows what runs here, with the error.
func TestThePageShowsRunningStacksWhenListingFails(t *testing.T) {
	fakePulumi(t, true)
	m := newTestManager(t)
	_, release, err := m.acquire(context.Background(), "agg-busy", "up", false)
	require.NoError(t, err)
	defer release()
	_, err = m.Stacks(context.Background())
	require.Error(t, err)

	code, page := getPage(t, m)
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, page, `id="list-error">listing the stacks failed:`)
	assert.Contains(t, page, `data-stack="agg-busy"`)
}
