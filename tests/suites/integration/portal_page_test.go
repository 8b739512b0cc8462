package integration

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"minimax-m3/portal/httpapi"
	"minimax-m3/tests/framework/poll"
	"minimax-m3/tests/framework/rackbox"
)

// The page in a real browser (headless Chromium, driven over the DevTools protocol) while an up
// runs in the rack box: the stack's resources appear with their step and status as the engine
// reports them, the download shown waiting while the box holds its pod (and the graph not yet
// created), then, once the test ends the download, the real operator's Ready ends the up and the
// page shows it done; reloaded, it shows the stack's outputs.
func TestBoxPortalPageShowsAnUpLive(t *testing.T) {
	parallelOnBox(t)
	browser, err := exec.LookPath("chromium")
	require.NoError(t, err, "make test installs chromium (Debian's package)")
	ctx := context.Background()
	ns := "box-portal-page"
	r := addRack(t, rackbox.NVL72("portal-page").WithGPUs(12))
	ts, c := boxPortal(t, "agg-page")

	worker := map[string]any{"scheduling": map[string]any{"nodeSelector": map[string]any{rackbox.RackLabel: r.Name}}}
	code, body := c.do(http.MethodPost, "/api/stacks/agg-page/up", map[string]any{"base": "agg", "hfToken": portalToken, "config": map[string]any{
		"namespace": map[string]any{"name": ns}, "modelDownload": map[string]any{"timeout": "3m", "image": rackbox.HeldImage},
		"readiness": map[string]any{"timeout": "3m"}, "worker": worker, "placement": map[string]any{"topologyKey": rackbox.CliqueLabel},
	}})
	require.Equal(t, http.StatusAccepted, code, string(body))

	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.Flag("headless", "new"))...)
	defer cancelAlloc()
	page, cancelPage := chromedp.NewContext(alloc)
	defer cancelPage()
	page, cancelTimeout := context.WithTimeout(page, 4*time.Minute)
	defer cancelTimeout()

	graphStatus := `section[data-stack="agg-page"] tr[data-resource="graph"] td:nth-child(3)`
	downloadStatus := `section[data-stack="agg-page"] tr[data-resource="model-download"] td:nth-child(3)`
	now := `section[data-stack="agg-page"] p.now`
	do := func(a chromedp.Action[chromedp.Void]) {
		t.Helper()
		_, err := chromedp.Run(page, a)
		require.NoError(t, err)
	}
	text := func(sel string) string {
		t.Helper()
		wait, cancel := context.WithTimeout(page, time.Minute)
		defer cancel()
		s, err := chromedp.Run(wait, chromedp.Text(sel))
		if err != nil {
			html, _ := chromedp.Run(page, chromedp.OuterHTML("html"))
			require.NoError(t, err, "reading %s from the page:\n%s", sel, html)
		}
		return s
	}

	do(signInPage(ts.URL))
	assert.Contains(t, text(`section[data-stack="agg-page"] h2`), "agg-page (up running)")
	// A poll condition: it returns what fails instead of failing the test. chromedp waits for the
	// element to be visible: the wait ends with the poll's.
	shows := func(sel string, ok func(string) bool) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			attempt, cancel := context.WithCancel(page)
			defer cancel()
			defer context.AfterFunc(ctx, cancel)()
			s, err := chromedp.Run(attempt, chromedp.Text(sel))
			return err == nil && ok(s), err
		}
	}
	release := heldDownload(t, ns)
	require.NoError(t, poll.Until(ctx, time.Minute, 100*time.Millisecond, "the page shows the download being waited for",
		shows(downloadStatus, func(s string) bool { return s == "started" || s == "waiting" })))
	_, graphExists := getOn(t, box.Client, graphGVK, ns, aggGraph)
	assert.False(t, graphExists, "no graph before the download")

	// The test ends the download: the Job controller completes it, the graph is created and the
	// operator's Ready ends the up.
	release()
	do(chromedp.WaitVisible(`section[data-stack="agg-page"] p.now.done`))
	assert.Equal(t, "up done", text(now))
	assert.Equal(t, "done", text(downloadStatus))
	assert.Equal(t, "done", text(graphStatus))

	do(chromedp.Reload())
	assert.Equal(t, ns, text(`section[data-stack="agg-page"] table.outputs tr:first-child td`))
}

// Behind a reverse proxy that serves the portal under /portal (forwarding the path unchanged):
// the login redirects to /portal/, the session cookie is scoped to it, the API answers under it,
// and the page's own event stream goes through it, so a finished preview shows on the page.
func TestPortalPageBehindAProxyAtABasePath(t *testing.T) {
	parallel(t)
	browser, err := exec.LookPath("chromium")
	require.NoError(t, err, "make test installs chromium (Debian's package)")
	m := newPortal(t)
	srv, err := httpapi.NewServer(context.Background(), m, portalBearer)
	require.NoError(t, err)
	srv.BasePath = "/portal"
	backend := httptest.NewServer(srv.Handler())
	t.Cleanup(backend.Close)
	target, err := url.Parse(backend.URL)
	require.NoError(t, err)
	proxy := httptest.NewServer(httputil.NewSingleHostReverseProxy(target))
	t.Cleanup(proxy.Close)
	c := &httpClient{t: t, base: proxy.URL + "/portal"}

	code, body := c.do(http.MethodPost, "/api/stacks/agg-base/preview", map[string]any{"base": "agg", "hfToken": portalToken,
		"config": map[string]any{"namespace": map[string]any{"name": "portal-base"}}})
	require.Equal(t, http.StatusAccepted, code, string(body))
	assert.Contains(t, string(body), `"events":"/portal/api/stacks/agg-base/events"`)
	_, errText := c.sse("agg-base")
	require.Empty(t, errText)
	outside := &httpClient{t: t, base: proxy.URL}
	code, _ = outside.do(http.MethodGet, "/api/stacks", nil)
	assert.Equal(t, http.StatusNotFound, code, "nothing outside the base path")

	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp := signIn(t, noRedirect, proxy.URL+"/portal", portalBearer, nil)
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
	assert.Equal(t, "/portal/", resp.Header.Get("Location"))
	require.Len(t, resp.Cookies(), 1)
	assert.Equal(t, "/portal/", resp.Cookies()[0].Path)

	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.Flag("headless", "new"))...)
	defer cancelAlloc()
	page, cancelPage := chromedp.NewContext(alloc)
	defer cancelPage()
	page, cancelTimeout := context.WithTimeout(page, 2*time.Minute)
	defer cancelTimeout()
	now := `section[data-stack="agg-base"] p.now.done`
	_, err = chromedp.Run(page, signInPage(proxy.URL+"/portal"))
	require.NoError(t, err)
	_, err = chromedp.Run(page, chromedp.WaitVisible(now))
	require.NoError(t, err)
	text, err := chromedp.Run(page, chromedp.Text(now))
	require.NoError(t, err)
	assert.Equal(t, "preview done", text, "the page's event stream, under the base path")
}

// signInPage opens the portal at base in the browser and signs in through its form, as a user does.
func signInPage(base string) chromedp.Action[chromedp.Void] {
	return chromedp.Steps(
		chromedp.Navigate(base+"/"), // sent on to the sign-in form
		chromedp.WaitVisible(`input[name="token"]`),
		chromedp.SendKeys(`input[name="token"]`, portalBearer),
		chromedp.Submit(`input[name="token"]`),
		chromedp.WaitVisible(`body[data-base]`), // the page, signed in
	)
}
