package portal_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"minimax-m3/portal"
	"minimax-m3/portal/httpapi"
)

const testBearer = "a-bearer-of-sixteen-or-more"

func getPage(t *testing.T, m *portal.Manager) (int, string) {
	t.Helper()
	srv, err := httpapi.NewServer(t.Context(), m, testBearer)
	require.NoError(t, err)
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.Header.Set("Authorization", "Bearer "+testBearer)
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, req)
	b, err := io.ReadAll(rec.Body)
	require.NoError(t, err)
	return rec.Code, string(b)
}

// A stack whose first operation holds it but has not created it on the backend yet is shown on the
// page: running, without an error (it has no state yet).
func TestThePageShowsAStackBeingCreated(t *testing.T) {
	portal.FakePulumi(t, false)
	m := portal.NewTestManager(t)
	release, err := portal.Hold(context.Background(), m, "agg-new", "up")
	require.NoError(t, err)
	defer release()

	code, page := getPage(t, m)
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, page, `data-stack="agg-new"`)
	assert.Contains(t, page, `agg-new <span class="running">(up running)</span>`)
	assert.NotContains(t, page, `class="failed"`, "a stack being created has no state yet: no error")
}

// When the backend cannot list its stacks, the page still shows what runs here, with the error
// (503: the body is the page).
func TestThePageShowsRunningStacksWhenListingFails(t *testing.T) {
	portal.FakePulumi(t, true)
	m := portal.NewTestManager(t)
	release, err := portal.Hold(context.Background(), m, "agg-busy", "up")
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

// What the page shows of the CLI, the backend or a request is text, never markup: an error whose
// text holds HTML is escaped.
func TestThePageEscapesWhatItShows(t *testing.T) {
	portal.FakePulumiListFails(t, `error: <b id="injected">backend</b> & 'x'`)
	m := portal.NewTestManager(t)
	code, page := getPage(t, m)
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, page, `&lt;b id=&#34;injected&#34;&gt;backend&lt;/b&gt; &amp; &#39;x&#39;`)
	assert.NotContains(t, page, `<b id="injected">`)
}
