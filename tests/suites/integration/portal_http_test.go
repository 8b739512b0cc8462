package integration

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"minimax-m3/portal"
	"minimax-m3/portal/httpapi"
	"minimax-m3/tests/framework/poll"
)

// startPortalServer serves a new portal manager over HTTP until the test ends, and destroys the
// stack the test deploys.
func startPortalServer(t *testing.T, stack, ns string) (*httptest.Server, *httpClient) {
	t.Helper()
	m := newPortal(t)
	srv, err := httpapi.NewServer(context.Background(), m, portalBearer)
	require.NoError(t, err)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	destroyAfter(t, m, stack, ns)
	return ts, &httpClient{t: t, base: ts.URL}
}

// The service, through real HTTP requests: the bearer token, 404, 400 with the problems by key,
// preview with a plan, up with it, 409 while it runs, progress as server-sent events, outputs, the
// page, destroy; the token in no response.
func TestPortalService(t *testing.T) {
	parallel(t)
	ts, c := startPortalServer(t, "agg-http", "portal-http")

	resp, err := http.Get(ts.URL + "/api/stacks")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)

	code, _ := c.do(http.MethodGet, "/api/stacks/agg-http", nil)
	assert.Equal(t, http.StatusNotFound, code)

	site := noWaits("portal-http")
	code, body := c.do(http.MethodPost, "/api/stacks/agg-http/up", map[string]any{
		"base": "agg", "hfToken": portalToken,
		"config": map[string]any{"namespace": map[string]any{"name": "Not_A_Namespace"}, "worker": map[string]any{"replicas": 0}},
	})
	assert.Equal(t, http.StatusBadRequest, code)
	var bad struct {
		Problems []struct{ Key string }
	}
	require.NoError(t, json.Unmarshal(body, &bad))
	assert.Equal(t, []struct{ Key string }{{"namespace.name"}, {"worker.replicas"}}, bad.Problems)
	// A token pasted into another field too: the problem names the field, never echoes the token.
	code, body = c.do(http.MethodPost, "/api/stacks/agg-http/preview", map[string]any{"base": "agg", "hfToken": portalToken,
		"config": map[string]any{"namespace": map[string]any{"name": portalToken}}})
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, string(body), `"key":"namespace.name"`)
	assert.Contains(t, string(body), "[secret]")
	assert.NotContains(t, string(body), portalToken)
	// A flag the program writes, smuggled in again through extraArgs (argparse keeps the last): refused
	// at its index before anything runs.
	code, body = c.do(http.MethodPost, "/api/stacks/agg-http/up", map[string]any{"base": "agg", "hfToken": portalToken,
		"config": map[string]any{"namespace": map[string]any{"name": "portal-http"}, "worker": map[string]any{"extraArgs": []string{"--kv-cache-dtype", "auto"}}}})
	assert.Equal(t, http.StatusBadRequest, code, string(body))
	assert.Contains(t, string(body), `"key":"worker.extraArgs[0]"`)
	// A request lowering the Pod Security of the namespace its stack creates: refused at its key.
	code, body = c.do(http.MethodPost, "/api/stacks/agg-http/up", map[string]any{"base": "agg", "hfToken": portalToken,
		"config": map[string]any{"namespace": map[string]any{"name": "portal-http", "podSecurity": "privileged"}}})
	assert.Equal(t, http.StatusBadRequest, code, string(body))
	assert.Contains(t, string(body), `"key":"namespace.podSecurity"`)
	code, body = c.do(http.MethodPost, "/api/stacks/agg-http/up", map[string]any{"base": "agg", "allowRoll": "Workers"})
	assert.Equal(t, http.StatusBadRequest, code)
	assert.Contains(t, string(body), `"key":"allowRoll"`)

	code, body = c.do(http.MethodPost, "/api/stacks/agg-http/preview", map[string]any{"base": "agg", "config": site, "hfToken": portalToken, "plan": true})
	require.Equal(t, http.StatusAccepted, code, string(body))
	events, errText := c.sse("agg-http")
	require.Empty(t, errText)
	var preview portal.PreviewResult
	last := events[len(events)-1]
	require.Equal(t, "result", last.Status)
	require.NoError(t, json.Unmarshal([]byte(last.Message), &preview))
	assert.Equal(t, 17, preview.Changes["create"])
	require.Regexp(t, `^[0-9a-f]{32}$`, preview.Plan, "the plan's name, not a path of the server's")

	// A second preview of the stack, by anyone, with another config, saves a plan of its own: the
	// first stays what its up applies, and neither plan is taken with the other's config.
	other := map[string]any{}
	for k, v := range site {
		other[k] = v
	}
	other["graphName"] = "portal-http-other"
	code, body = c.do(http.MethodPost, "/api/stacks/agg-http/preview", map[string]any{"base": "agg", "config": other, "hfToken": portalToken, "plan": true})
	require.Equal(t, http.StatusAccepted, code, string(body))
	events, errText = c.sse("agg-http")
	require.Empty(t, errText)
	var second portal.PreviewResult
	require.NoError(t, json.Unmarshal([]byte(events[len(events)-1].Message), &second))
	require.NotEmpty(t, second.Plan)
	assert.NotEqual(t, preview.Plan, second.Plan)
	for _, attempt := range []struct {
		config map[string]any
		plan   string
		want   string
	}{
		{other, preview.Plan, "saved by a preview of another request"},
		{site, second.Plan, "saved by a preview of another request"},
		{site, "../agg/" + preview.Plan, "not a plan a preview of this stack returned"},
		{site, strings.Repeat("0", 32), "no such plan"},
	} {
		code, body = c.do(http.MethodPost, "/api/stacks/agg-http/up", map[string]any{"base": "agg", "config": attempt.config, "plan": attempt.plan})
		assert.Equal(t, http.StatusBadRequest, code, string(body))
		assert.Contains(t, string(body), `"key":"plan"`)
		assert.Contains(t, string(body), attempt.want)
	}

	code, body = c.do(http.MethodPost, "/api/stacks/agg-http/up", map[string]any{"base": "agg", "config": site, "plan": preview.Plan})
	require.Equal(t, http.StatusAccepted, code, string(body))
	code, body = c.do(http.MethodPost, "/api/stacks/agg-http/up", map[string]any{"base": "agg", "config": site})
	assert.Equal(t, http.StatusConflict, code, string(body))
	assert.Contains(t, string(body), "stack agg-http is busy: up is running")
	events, errText = c.sse("agg-http")
	require.Empty(t, errText)
	seen := map[string]bool{}
	for _, e := range events {
		seen[e.Name+" "+e.Status] = true
	}
	assert.True(t, seen["graph done"], "%v", seen)
	assert.True(t, seen["model-download done"], "%v", seen)
	code, body = c.do(http.MethodPost, "/api/stacks/agg-http/up", map[string]any{"base": "agg", "config": site, "plan": preview.Plan})
	assert.Equal(t, http.StatusBadRequest, code, "a plan is applied once: %s", body)
	assert.Contains(t, string(body), "no such plan")

	code, body = c.do(http.MethodGet, "/api/stacks/agg-http", nil)
	require.Equal(t, http.StatusOK, code)
	var out portal.Outputs
	require.NoError(t, json.Unmarshal(body, &out))
	assert.Equal(t, 12, out.GPUCount)
	assert.Equal(t, "portal-http", out.Namespace)

	code, body = c.do(http.MethodGet, "/api/stacks", nil)
	require.Equal(t, http.StatusOK, code)
	assert.JSONEq(t, `[{"name":"agg-http"}]`, string(body))

	// The page: server-rendered, the stack and its outputs.
	code, body = c.do(http.MethodGet, "/", nil)
	require.Equal(t, http.StatusOK, code)
	assert.Contains(t, string(body), `<section class="stack" id="stack-agg-http" data-stack="agg-http">`)
	assert.Contains(t, string(body), "<tr><th>namespace</th><td>portal-http</td></tr>")

	stop := playControllers(t, cluster.client, "portal-http", controllers{})
	code, _ = c.do(http.MethodPost, "/api/stacks/agg-http/destroy", nil)
	require.Equal(t, http.StatusAccepted, code)
	_, errText = c.sse("agg-http")
	stop()
	require.Empty(t, errText)

	for _, b := range c.bodies {
		assert.NotContains(t, b, portalToken)
	}
}

// The command: it refuses a non-loopback address without a token, and on loopback without one it
// makes a random token, prints the page's address with it, and requires it.
// Served with -tls-cert/-tls-key, the portal speaks TLS and marks the session cookie Secure; on
// SIGTERM it stops taking requests, waits for its operations and exits cleanly.
func TestPortalCommandServesTLSAndStopsOnSIGTERM(t *testing.T) {
	parallel(t)
	bin := portalCommand(t)
	dir := t.TempDir()
	certFile, keyFile, pool := selfSignedCert(t, dir)
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0", "-state-dir", filepath.Join(dir, "state"), "-project-dir", cluster.root,
		"-tls-cert", certFile, "-tls-key", keyFile)
	cmd.Env = append(os.Environ(), "MINIMAX_M3_PORTAL_TOKEN="+portalBearer)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string, 16)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	addr := ""
	for l := range lines {
		if after, ok := strings.CutPrefix(l, "serving on "); ok {
			addr = after
			break
		}
	}
	require.True(t, strings.HasPrefix(addr, "https://"), addr)
	client := &http.Client{
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	resp := signIn(t, client, addr, portalBearer, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Len(t, resp.Cookies(), 1)
	assert.True(t, resp.Cookies()[0].Secure, "over TLS the session cookie is Secure")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	var rest []string
	for l := range lines {
		rest = append(rest, l)
	}
	require.NoError(t, cmd.Wait(), strings.Join(rest, "\n"))
	assert.Contains(t, rest, "stopped")
}

// selfSignedCert writes a certificate for 127.0.0.1 and its key, and returns a pool trusting it.
func selfSignedCert(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "portal"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// runPortalCommand starts cmd/portal on a loopback port with a state directory and returns its
// address and the random token it printed.
func runPortalCommand(t *testing.T, bin, stateDir string) (addr, token string) {
	t.Helper()
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0", "-state-dir", stateDir, "-project-dir", cluster.root)
	cmd.Env = os.Environ()
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	for (token == "" || addr == "") && sc.Scan() {
		line := sc.Text()
		if _, after, ok := strings.Cut(line, "random token: "); ok {
			token = after
		}
		if after, ok := strings.CutPrefix(line, "serving on "); ok {
			addr = after
		}
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	return addr, token
}

func TestPortalCommandGuardsItsAddress(t *testing.T) {
	parallel(t)
	bin := portalCommand(t)
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}

	cmd := exec.Command(bin, "-addr", "0.0.0.0:0", "-state-dir", t.TempDir(), "-project-dir", cluster.root)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "portal: refusing to listen on 0.0.0.0:0 without MINIMAX_M3_PORTAL_TOKEN")

	// Beyond loopback the token would cross the network in plain text: TLS, or an explicit flag.
	cmd = exec.Command(bin, "-addr", "0.0.0.0:0", "-state-dir", t.TempDir(), "-project-dir", cluster.root)
	cmd.Env = append(env, "MINIMAX_M3_PORTAL_TOKEN="+portalBearer)
	out, err = cmd.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "refusing to serve plain HTTP on 0.0.0.0:0")

	// Users of their own, or the one shared token: never both; a users file with a problem is
	// refused at its key before the portal serves.
	users := filepath.Join(t.TempDir(), "users.yaml")
	require.NoError(t, os.WriteFile(users, []byte("users:\n  - name: alice\n    tokenSHA256: 00\n    stacks: [\"*\"]\n"), 0o600))
	cmd = exec.Command(bin, "-state-dir", t.TempDir(), "-project-dir", cluster.root, "-users", users)
	cmd.Env = append(env, "MINIMAX_M3_PORTAL_TOKEN="+portalBearer)
	out, err = cmd.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "give -users or MINIMAX_M3_PORTAL_TOKEN, not both")
	cmd = exec.Command(bin, "-state-dir", t.TempDir(), "-project-dir", cluster.root, "-users", users)
	cmd.Env = env
	out, err = cmd.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "portal: -users: "+users+": users[0].tokenSHA256: 64 hex digits")
	cmd = exec.Command(bin, "-state-dir", t.TempDir(), "-project-dir", cluster.root, "-identity-header", "X-Forwarded-Email", "-trusted-proxies", "10.0.0.5")
	cmd.Env = append(env, "MINIMAX_M3_PORTAL_TOKEN="+portalBearer)
	out, err = cmd.CombinedOutput()
	require.Error(t, err)
	assert.Contains(t, string(out), "-identity-header needs -users")

	stateDir := t.TempDir()
	addr, token := runPortalCommand(t, bin, stateDir)
	require.Len(t, token, 48, "a random token of 24 bytes")
	resp, err := http.Get(addr + "/api/stacks")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	req, _ := http.NewRequest(http.MethodGet, addr+"/api/stacks", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	assert.JSONEq(t, `[]`, string(body))
	// The refusal is in the audit log, beside the state (owner-only), with no token in it.
	log, err := os.ReadFile(filepath.Join(stateDir, "audit.log"))
	require.NoError(t, err)
	assert.Contains(t, string(log), `"method":"GET","path":"/api/stacks","status":401}`)
	assert.NotContains(t, string(log), token)
	fi, err := os.Stat(filepath.Join(stateDir, "audit.log"))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
}

// The attacks a security review reproduced against cmd/portal, each refused before anything runs
// or is written: a POST from a page on another port of the same host carrying only the page's
// cookie; a body that is not JSON; a stack name that is a path; a misspelled config key or an
// unknown body field; up with "plan": true; a 64 MiB body.
func TestPortalCommandRefusesWhatASecurityReviewFound(t *testing.T) {
	parallel(t)
	bin := portalCommand(t)
	tmp := t.TempDir()
	stateDir := filepath.Join(tmp, "a", "b", "state")
	addr, token := runPortalCommand(t, bin, stateDir)
	send := func(method, path, contentType string, body io.Reader, header map[string]string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, addr+path, body)
		require.NoError(t, err)
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	bearer := map[string]string{"Authorization": "Bearer " + token}
	cookie := "minimax-m3-portal=" + token

	// Cross-site: a page served from another port of this host posts destroy with the cookie the
	// browser attaches (SameSite ignores ports), as a text/plain "simple request" needing no
	// preflight. The browser says where the request comes from; both headers are refused alone.
	// Every operation that changes something is refused, recover and cancel included.
	ops := []string{"preview", "up", "refresh", "destroy", "recover", "cancel"}
	for name, h := range map[string]map[string]string{
		"Sec-Fetch-Site": {"Cookie": cookie, "Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:1"},
		"Origin":         {"Cookie": cookie, "Origin": "http://127.0.0.1:1"},
	} {
		for _, op := range ops {
			status, body := send(http.MethodPost, "/api/stacks/agg/"+op, "text/plain", strings.NewReader("{}"), h)
			assert.Equal(t, http.StatusForbidden, status, "%s %s: %s", name, op, body)
		}
		// Nor may another site sign the browser in (with a token it knows) through the form.
		status, body := send(http.MethodPost, "/login", "application/x-www-form-urlencoded", strings.NewReader(url.Values{"token": {token}}.Encode()), h)
		assert.Equal(t, http.StatusForbidden, status, "%s login: %s", name, body)
	}
	// Same origin, but not JSON: refused.
	status, body := send(http.MethodPost, "/api/stacks/agg/preview", "text/plain", strings.NewReader(`{"base":"agg"}`), bearer)
	assert.Equal(t, http.StatusUnsupportedMediaType, status, body)

	// A stack name that is a path: refused, and nothing written outside the state folder, nor a
	// workspace for a stack that does not exist.
	for _, path := range []string{"/api/stacks/..%2F..%2F..%2Fx", "/api/stacks/..%2F..%2F..%2Fx/history", "/api/stacks/..%2F..%2F..%2Fx/events"} {
		status, body = send(http.MethodGet, path, "", nil, bearer)
		assert.Equal(t, http.StatusBadRequest, status, "%s: %s", path, body)
		assert.Contains(t, body, `"key":"stack"`, path)
	}
	for _, op := range ops {
		status, body = send(http.MethodPost, "/api/stacks/..%2F..%2F..%2Fx/"+op, "application/json", strings.NewReader(`{"base":"agg"}`), bearer)
		assert.Equal(t, http.StatusBadRequest, status, "%s: %s", op, body)
		assert.Contains(t, body, `"key":"stack"`, op)
	}
	assert.NoDirExists(t, filepath.Join(tmp, "a", "x"))
	status, body = send(http.MethodGet, "/api/stacks/nobody/history", "", nil, bearer)
	assert.Equal(t, http.StatusNotFound, status, body)
	status, body = send(http.MethodPost, "/api/stacks/nobody/recover", "", nil, bearer)
	assert.Equal(t, http.StatusNotFound, status, body)
	assert.NoDirExists(t, filepath.Join(stateDir, "workspaces", "nobody"), "an unknown stack leaves nothing behind")

	// Strict bodies: every unknown field is a problem at its key.
	status, body = send(http.MethodPost, "/api/stacks/agg/preview", "application/json",
		strings.NewReader(`{"base":"agg","config":{"worker":{"replicaz":2},"modelCache":{"storageClass":"rwx"}}}`), bearer)
	assert.Equal(t, http.StatusBadRequest, status, body)
	assert.Contains(t, body, `"key":"worker.replicaz"`)
	status, body = send(http.MethodPost, "/api/stacks/agg/preview", "application/json", strings.NewReader(`{"base":"agg","hf_token":"hf_x"}`), bearer)
	assert.Equal(t, http.StatusBadRequest, status, body)
	assert.Contains(t, body, `"key":"hf_token"`)
	assert.NotContains(t, body, "hf_x")
	status, body = send(http.MethodPost, "/api/stacks/agg/up", "application/json", strings.NewReader(`{"base":"agg","plan":true}`), bearer)
	assert.Equal(t, http.StatusBadRequest, status, body)
	assert.Contains(t, body, `"key":"plan"`)
	status, body = send(http.MethodPost, "/api/stacks/agg/recover", "application/json", strings.NewReader(`{"force":true}`), bearer)
	assert.Equal(t, http.StatusBadRequest, status, body)
	assert.Contains(t, body, `"key":"force"`)

	// A body past the cap: 413, without reading it all.
	big := io.MultiReader(strings.NewReader(`{"base":"agg","config":{"graphName":"`), io.LimitReader(zeros{}, 64<<20), strings.NewReader(`"}}`))
	status, body = send(http.MethodPost, "/api/stacks/agg/preview", "application/json", big, bearer)
	assert.Equal(t, http.StatusRequestEntityTooLarge, status, body)
	big = io.MultiReader(strings.NewReader(`{"base":"`), io.LimitReader(zeros{}, 64<<20), strings.NewReader(`"}`))
	status, body = send(http.MethodPost, "/api/stacks/agg/recover", "application/json", big, bearer)
	assert.Equal(t, http.StatusRequestEntityTooLarge, status, body)

	// The token is never taken in a URL (proxy logs, history, Referer): refused, even when right,
	// and no session is issued. Unauthenticated, the page sends the browser to its sign-in form.
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, path := range []string{"/?token=" + token, "/api/stacks?token=" + token, "/login?token=" + token} {
		resp, err := noRedirect.Get(addr + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		assert.Equal(t, http.StatusBadRequest, resp.StatusCode, path)
		assert.Contains(t, string(body), "the token is never taken in a URL", path)
		assert.Empty(t, resp.Cookies(), path)
	}
	resp, err := noRedirect.Get(addr + "/")
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusSeeOther, resp.StatusCode)
	assert.Equal(t, "/login", resp.Header.Get("Location"))
	resp = signIn(t, noRedirect, addr, "wrong-token-of-sixteen-chars", nil)
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	assert.Empty(t, resp.Cookies(), "a wrong token buys no session")
	// Behind a TLS-terminating proxy that says so, the cookie is Secure; over plain HTTP it cannot be.
	resp = signIn(t, noRedirect, addr, token, map[string]string{"X-Forwarded-Proto": "https"})
	require.Len(t, resp.Cookies(), 1)
	assert.True(t, resp.Cookies()[0].Secure)

	// The page's cookie is a session issued at sign-in, never the token; the page carries a
	// Content-Security-Policy admitting only its own script, and no response is cached or sniffed.
	resp = signIn(t, noRedirect, addr, token, nil)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	assert.Equal(t, "/", resp.Header.Get("Location"))
	cookies := resp.Cookies()
	assert.False(t, cookies[0].Secure, "plain HTTP on loopback")
	require.Len(t, cookies, 1)
	assert.NotEqual(t, token, cookies[0].Value, "the cookie holds a session, not the token")
	assert.True(t, cookies[0].HttpOnly)
	assert.Equal(t, http.SameSiteStrictMode, cookies[0].SameSite)
	status, body = send(http.MethodGet, "/api/stacks", "", nil, map[string]string{"Cookie": "minimax-m3-portal=" + cookies[0].Value})
	assert.Equal(t, http.StatusOK, status, body)
	status, _ = send(http.MethodGet, "/api/stacks", "", nil, map[string]string{"Cookie": cookie})
	assert.Equal(t, http.StatusUnauthorized, status, "the token is no cookie value")
	req, err := http.NewRequest(http.MethodGet, addr+"/", nil)
	require.NoError(t, err)
	req.Header.Set("Cookie", "minimax-m3-portal="+cookies[0].Value)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	page, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	csp := resp.Header.Get("Content-Security-Policy")
	assert.Contains(t, csp, "default-src 'none'")
	nonce := csp[strings.Index(csp, "'nonce-")+len("'nonce-"):]
	nonce = nonce[:strings.Index(nonce, "'")]
	assert.Contains(t, string(page), `<script nonce="`+nonce+`">`)
	assert.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
	assert.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	assert.Equal(t, "no-referrer", resp.Header.Get("Referrer-Policy"))

	// Cancel answers at once; with nothing running it says so.
	status, body = send(http.MethodPost, "/api/stacks/agg/cancel", "", nil, bearer)
	assert.Equal(t, http.StatusConflict, status, body)

	entries, err := os.ReadDir(filepath.Join(stateDir, "workspaces"))
	require.NoError(t, err)
	for _, e := range entries {
		assert.True(t, strings.HasPrefix(e.Name(), "."), "no workspace was created for a refused request: %s", e.Name())
	}
}

// signIn posts the token to the portal's sign-in form at base, with extra headers, and returns
// the response (its body read and closed).
func signIn(t *testing.T, c *http.Client, base, token string, headers map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, base+"/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp
}

// zeros is an endless reader of '0'.
type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = '0'
	}
	return len(p), nil
}

// The service's limits: an operation's log keeps its last MaxEvents events (a stream that missed
// some is told how many), the portal keeps the last operations of MaxLogs stacks (the oldest
// finished one goes), and MaxStreams event streams may be open at once (one more is 429).
func TestPortalServiceLimits(t *testing.T) {
	parallel(t)
	m := newPortal(t)
	srv, err := httpapi.NewServer(context.Background(), m, portalBearer)
	require.NoError(t, err)
	srv.MaxEvents, srv.MaxLogs, srv.MaxStreams = 4, 2, 1
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	c := &httpClient{t: t, base: ts.URL}
	preview := func(stack string) {
		code, body := c.do(http.MethodPost, "/api/stacks/"+stack+"/preview", map[string]any{
			"base": "agg", "hfToken": portalToken, "config": map[string]any{"namespace": map[string]any{"name": "portal-limits"}}})
		require.Equal(t, http.StatusAccepted, code, string(body))
	}

	preview("agg-limits-1")
	// A late subscriber (once the preview ended) reads what the log kept.
	require.NoError(t, poll.Until(context.Background(), 2*time.Minute, 200*time.Millisecond, "the preview of agg-limits-1 ended", func(ctx context.Context) (bool, error) {
		code, body, err := c.tryDo(ctx, http.MethodGet, "/api/stacks", nil)
		return err == nil && code == http.StatusOK && strings.Contains(string(body), `"name":"agg-limits-1"`) && !strings.Contains(string(body), `"running"`), err
	}))
	events, errText := c.sse("agg-limits-1")
	require.Empty(t, errText)
	require.Len(t, events, 5, "the dropped-events notice and the last 4")
	assert.Equal(t, "dropped", events[0].Status)
	assert.Regexp(t, `^\d+ earlier events of this operation are no longer kept$`, events[0].Message)
	assert.Equal(t, "result", events[4].Status, "the last event kept")

	preview("agg-limits-2")
	_, _ = c.sse("agg-limits-2")
	preview("agg-limits-3")
	_, _ = c.sse("agg-limits-3")
	code, body := c.do(http.MethodGet, "/api/stacks/agg-limits-1/events", nil)
	assert.Equal(t, http.StatusNotFound, code, "the oldest log dropped: %s", body)
	code, _ = c.do(http.MethodGet, "/api/stacks/agg-limits-2/events", nil)
	assert.Equal(t, http.StatusOK, code)

	// A stream held open (an up waiting for a graph no controller makes Ready), and one more.
	code, body = c.do(http.MethodPost, "/api/stacks/agg-limits-3/up", map[string]any{
		"base": "agg", "config": map[string]any{"namespace": map[string]any{"name": "portal-limits"}, "modelDownload": map[string]any{"enabled": false},
			"readiness": map[string]any{"timeout": "3m"}, "smokeTest": map[string]any{"enabled": false}}})
	require.Equal(t, http.StatusAccepted, code, string(body))
	t.Cleanup(func() {
		stop := playControllers(t, cluster.client, "portal-limits", controllers{})
		defer stop()
		_ = m.Destroy(context.Background(), "agg-limits-3", true, portal.RunOptions{Wait: true})
	})
	req, err := http.NewRequest(http.MethodGet, ts.URL+"/api/stacks/agg-limits-3/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+portalBearer)
	held, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, held.StatusCode)
	code, body = c.do(http.MethodGet, "/api/stacks/agg-limits-3/events", nil)
	assert.Equal(t, http.StatusTooManyRequests, code)
	assert.Contains(t, string(body), "1 event streams are open, the most this portal serves at once")
	_ = held.Body.Close()
	code, _ = c.do(http.MethodPost, "/api/stacks/agg-limits-3/cancel", nil)
	require.Equal(t, http.StatusAccepted, code)
	// Once the held stream is closed, a new one is served again (to the end of the cancelled up).
	require.NoError(t, poll.Until(context.Background(), time.Minute, 200*time.Millisecond, "a new event stream is served", func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/api/stacks/agg-limits-3/events", nil)
		if err != nil {
			return false, err
		}
		req.Header.Set("Authorization", "Bearer "+portalBearer)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false, err
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}))
}
