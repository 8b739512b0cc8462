package integration

import (
	"context"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The page in a real browser (headless Chromium, driven over the DevTools protocol) while an up
// runs: the stack's resources appear with their step and status as the engine reports them, the
// graph waits (the test plays no operator yet), and once the test plays the operator's Ready the
// page shows the up done; reloaded, it shows the stack's outputs.
func TestPortalPageShowsAnUpLive(t *testing.T) {
	browser, err := exec.LookPath("chromium")
	require.NoError(t, err, "make test installs chromium (Debian's package)")
	ctx := context.Background()
	ts, c := startPortalServer(t, "agg-page", "portal-page")

	// The download completes; the graph waits for an operator that is not there yet.
	stopJobs := playControllers(t, "portal-page", controllers{jobOutcome: "complete"})
	defer stopJobs()
	code, body := c.do(http.MethodPost, "/api/stacks/agg-page/up", map[string]any{"base": "agg", "hfToken": portalToken, "config": map[string]any{
		"namespace": map[string]any{"name": "portal-page"}, "modelDownload": map[string]any{"timeout": "3m"},
		"readiness": map[string]any{"timeout": "3m"}, "smokeTest": map[string]any{"enabled": false},
	}})
	require.Equal(t, http.StatusAccepted, code, string(body))

	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.Flag("headless", "new"))...)
	defer cancelAlloc()
	page, cancelPage := chromedp.NewContext(alloc)
	defer cancelPage()
	page, cancelTimeout := context.WithTimeout(page, 3*time.Minute)
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
		s, err := chromedp.Run(page, chromedp.Text(sel))
		require.NoError(t, err)
		return s
	}

	do(chromedp.Navigate(ts.URL + "/?token=" + portalBearer))
	assert.Contains(t, text(`section[data-stack="agg-page"] h2`), "agg-page (up running)")
	do(chromedp.WaitVisible(graphStatus))
	require.Eventually(t, func() bool { return text(downloadStatus) == "done" }, time.Minute, 100*time.Millisecond,
		"the download Job finished before the graph")
	assert.Contains(t, []string{"started", "waiting"}, text(graphStatus), "the graph is being waited for")
	assert.Contains(t, text(now), "graph")

	// The operator reports the graph Ready: the page shows the up done.
	stopOperator := playControllers(t, "portal-page", controllers{graphReady: true})
	defer stopOperator()
	do(chromedp.WaitVisible(`section[data-stack="agg-page"] p.now.done`))
	assert.Equal(t, "up done", text(now))
	assert.Equal(t, "done", text(graphStatus))

	do(chromedp.Reload())
	assert.Equal(t, "portal-page", text(`section[data-stack="agg-page"] table.outputs tr:first-child td`))
}
