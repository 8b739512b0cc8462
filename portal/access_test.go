package portal_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"minimax-m3/portal"
	"minimax-m3/portal/httpapi"
)

const (
	aliceToken = "alice-token-of-team-a-0123456789"
	bobToken   = "bob-token-of-team-b-0123456789ab"
)

func sha(token string) string {
	h := sha256.Sum256([]byte(token))
	return hex.EncodeToString(h[:])
}

// lockedBuffer is an audit log the test reads while the server writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) records() []httpapi.AuditRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []httpapi.AuditRecord
	for _, line := range strings.Split(strings.TrimSpace(l.b.String()), "\n") {
		var r httpapi.AuditRecord
		if json.Unmarshal([]byte(line), &r) == nil {
			out = append(out, r)
		}
	}
	return out
}

// teamsServer serves a portal of two teams' users, alice (team-a-* stacks, namespace team-a) and
// bob (team-b-*, team-b), over a backend holding one stack of each team.
func teamsServer(t *testing.T) (http.Handler, *lockedBuffer, func() []string) {
	t.Helper()
	cli := portal.FakePulumiStacks(t, "team-a-agg", "team-b-agg")
	users, err := httpapi.ParseUsers([]byte(`users:
  - name: alice@team-a
    tokenSHA256: ` + sha(aliceToken) + `
    stacks: ["team-a-*"]
    namespaces: ["team-a"]
    hostnames: ["*.team-a.example.com"]
  - name: bob@team-b
    tokenSHA256: ` + strings.ToUpper(sha(bobToken)) + `
    stacks: ["team-b-*"]
    namespaces: ["team-b", "team-b-*"]
`))
	require.NoError(t, err)
	srv := httpapi.NewServerForUsers(t.Context(), portal.NewTestManager(t), users)
	audit := &lockedBuffer{}
	srv.AuditLog = audit
	return srv.Handler(), audit, func() []string { return cli.Calls(t) }
}

func call(h http.Handler, method, target, token string, body any) (int, string) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req := httptest.NewRequest(method, target, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// A user of one team sees only their team's stacks, and every route of another team's stack is
// refused (403) before the portal reads or runs anything for it: outputs, history, events and each
// operation, cancel and recover included.
func TestAPortalUserReachesOnlyTheirStacks(t *testing.T) {
	h, audit, calls := teamsServer(t)

	code, body := call(h, http.MethodGet, "/api/stacks", aliceToken, nil)
	require.Equal(t, http.StatusOK, code, body)
	assert.JSONEq(t, `[{"name":"team-a-agg"}]`, body)
	code, body = call(h, http.MethodGet, "/api/stacks", bobToken, nil)
	require.Equal(t, http.StatusOK, code, body)
	assert.JSONEq(t, `[{"name":"team-b-agg"}]`, body)

	before := len(calls())
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, "/api/stacks/team-b-agg"},
		{http.MethodGet, "/api/stacks/team-b-agg/history"},
		{http.MethodGet, "/api/stacks/team-b-agg/events"},
		{http.MethodPost, "/api/stacks/team-b-agg/preview"},
		{http.MethodPost, "/api/stacks/team-b-agg/up"},
		{http.MethodPost, "/api/stacks/team-b-agg/refresh"},
		{http.MethodPost, "/api/stacks/team-b-agg/destroy"},
		{http.MethodPost, "/api/stacks/team-b-agg/cancel"},
		{http.MethodPost, "/api/stacks/team-b-agg/recover"},
		{http.MethodPost, "/api/stacks/team-b-new/up"},
	} {
		code, body := call(h, r.method, r.path, aliceToken, map[string]any{"base": "agg", "config": map[string]any{"namespace": map[string]any{"name": "team-a"}}})
		assert.Equal(t, http.StatusForbidden, code, "%s %s: %s", r.method, r.path, body)
		assert.Contains(t, body, "user alice@team-a may not reach stack team-b-", r.path)
	}
	// Nor does a path that escapes its stack name reach another team's: refused as no stack name
	// before any grant is looked at (400), or not routed at all (404).
	for _, escaped := range []string{"/api/stacks/team-a-..%2Fteam-b-agg/history", "/api/stacks/team-a-agg%2F..%2Fteam-b-agg", "/api/stacks/team-a-%2A/destroy"} {
		code, body := call(h, http.MethodPost, escaped, aliceToken, nil)
		assert.Contains(t, []int{http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed}, code, "%s: %s", escaped, body)
	}
	assert.Len(t, calls(), before, "a refused request runs no CLI: %v", calls()[before:])

	// The page lists only the user's stacks.
	code, page := call(h, http.MethodGet, "/", aliceToken, nil)
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, page, `data-stack="team-a-agg"`)
	assert.NotContains(t, page, "team-b-agg")

	var refused []string
	for _, r := range audit.records() {
		if r.Status == http.StatusForbidden {
			assert.Equal(t, "alice@team-a", r.User, "%+v", r)
			refused = append(refused, r.Method+" "+r.Stack+" "+r.Operation)
		}
	}
	assert.Contains(t, refused, "GET team-b-agg history")
	assert.Contains(t, refused, "POST team-b-agg destroy")
	assert.Len(t, refused, 10, "every refusal is on record, the reads' included")
}

// A user's preview or up into a namespace not granted to them is refused at namespace.name (403),
// whatever stack name they use, before any plan is read or engine started; bob's pattern grants
// team-b-* namespaces too. So is a route on a hostname not granted to them.
func TestAPortalUserDeploysOnlyIntoTheirNamespaces(t *testing.T) {
	h, audit, calls := teamsServer(t)
	before := len(calls())
	for _, ns := range []string{"team-b", "kube-system", "team-a-extra"} {
		for _, op := range []string{"preview", "up"} {
			code, body := call(h, http.MethodPost, "/api/stacks/team-a-agg/"+op, aliceToken, map[string]any{
				"base": "agg", "config": map[string]any{"namespace": map[string]any{"name": ns}}, "plan": nil})
			assert.Equal(t, http.StatusForbidden, code, body)
			assert.Contains(t, body, `"key":"namespace.name"`)
			assert.Contains(t, body, `user alice@team-a may not deploy into namespace \"`+ns+`\" (their namespaces: team-a)`)
		}
	}
	// The dashboard's ConfigMap lands in a namespace of its own choosing: the same grants.
	for _, op := range []string{"preview", "up"} {
		code, body := call(h, http.MethodPost, "/api/stacks/team-a-agg/"+op, aliceToken, map[string]any{
			"base": "agg", "config": map[string]any{"namespace": map[string]any{"name": "team-a"},
				"observability": map[string]any{"enabled": true, "dashboard": map[string]any{"namespace": "monitoring"}}}, "plan": nil})
		assert.Equal(t, http.StatusForbidden, code, body)
		assert.Contains(t, body, `"key":"observability.dashboard.namespace"`)
		assert.Contains(t, body, `user alice@team-a may not deploy into namespace \"monitoring\" (their namespaces: team-a)`)
	}
	// A hostname on the site's shared Gateways is granted as a namespace is: alice routes only her
	// team's names, and bob, granted none, may not route at all.
	route := func(token, ns, hostname string) (int, string) {
		return call(h, http.MethodPost, "/api/stacks/team-a-agg/preview", token, map[string]any{
			"base": "agg", "config": map[string]any{"namespace": map[string]any{"name": ns},
				"exposure": map[string]any{"enabled": true, "hostname": hostname, "gateway": map[string]any{"namespace": "gateways", "name": "shared", "sectionName": "https"}}}, "plan": nil})
	}
	for _, hostname := range []string{"api.example.com", "m3.team-b.example.com", "team-a.example.com.evil.io", "team-a.example.com", "m3.evil-team-a.example.com"} {
		code, body := route(aliceToken, "team-a", hostname)
		assert.Equal(t, http.StatusForbidden, code, body)
		assert.Contains(t, body, `"key":"exposure.hostname"`)
		assert.Contains(t, body, `user alice@team-a may not route hostname \"`+hostname+`\" on the site's Gateways (their hostnames: *.team-a.example.com)`)
	}
	code, body := call(h, http.MethodPost, "/api/stacks/team-b-agg/preview", bobToken, map[string]any{
		"base": "agg", "config": map[string]any{"namespace": map[string]any{"name": "team-b"},
			"exposure": map[string]any{"enabled": true, "hostname": "m3.team-b.example.com"}}, "plan": nil})
	assert.Equal(t, http.StatusForbidden, code, body)
	assert.Contains(t, body, `"key":"exposure.hostname"`)

	// A body that names no namespace is validation's to refuse: the base profiles name none.
	code, body = call(h, http.MethodPost, "/api/stacks/team-a-agg/up", aliceToken, map[string]any{"base": "agg"})
	assert.Equal(t, http.StatusBadRequest, code, body)
	assert.Contains(t, body, `"key":"namespace.name","message":"is required`)
	assert.Len(t, calls(), before, "nothing ran: %v", calls()[before:])

	// Within their grants the request goes on to validation (a bad value is the next refusal).
	code, body = call(h, http.MethodPost, "/api/stacks/team-b-x/preview", bobToken, map[string]any{"base": "agg", "hfToken": "hf_bobs_own_token_42",
		"config": map[string]any{"namespace": map[string]any{"name": "team-b-x"}, "graphName": "hf_bobs_own_token_42", "worker": map[string]any{"replicas": 0}}})
	assert.Equal(t, http.StatusBadRequest, code, body)
	assert.Contains(t, body, `"key":"worker.replicas"`)
	assert.Eventually(t, func() bool {
		for _, r := range audit.records() {
			if r.User == "bob@team-b" && r.Stack == "team-b-x" && r.Operation == "preview" && strings.HasPrefix(r.Outcome, "failed: ") {
				// With the config it asked for, as the stack would hold it.
				return r.Config["namespace"] == `{"name":"team-b-x"}` && r.Config["worker"] != ""
			}
		}
		return false
	}, 10*time.Second, 20*time.Millisecond, "the operation's end is on record with its user: %+v", audit.records())
	audit.mu.Lock()
	defer audit.mu.Unlock()
	assert.NotContains(t, audit.b.String(), "hf_bobs_own_token_42", "the token is on no record, wherever the request put it")
}

// The sign-in form makes a session of the user whose token it was given: the cookie carries the
// identity (bob's session sees bob's stacks), a wrong token is refused and on record without a user,
// and no record holds a token.
func TestThePortalSessionIsTheSignedInUsers(t *testing.T) {
	h, audit, _ := teamsServer(t)
	login := func(token string) *http.Response {
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Result()
	}
	resp := login(aliceToken + "x")
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	resp = login(bobToken)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Len(t, resp.Cookies(), 1)

	req := httptest.NewRequest(http.MethodGet, "/api/stacks", nil)
	req.AddCookie(resp.Cookies()[0])
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusOK, rec.Code)
	assert.JSONEq(t, `[{"name":"team-b-agg"}]`, rec.Body.String())
	req = httptest.NewRequest(http.MethodGet, "/api/stacks/team-a-agg", nil)
	req.AddCookie(resp.Cookies()[0])
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	assert.Equal(t, http.StatusForbidden, rec.Code)

	var recs []httpapi.AuditRecord
	for _, r := range audit.records() {
		if r.Phase == "" { // the responses; each request's arrival is on record before it
			recs = append(recs, r)
		}
	}
	require.GreaterOrEqual(t, len(recs), 4, "%+v", recs)
	assert.Equal(t, httpapi.AuditRecord{Time: recs[0].Time, Remote: recs[0].Remote, Method: "POST", Path: "/login", Status: 401}, recs[0])
	assert.Equal(t, "bob@team-b", recs[1].User)
	assert.Equal(t, http.StatusSeeOther, recs[1].Status)
	assert.Equal(t, []any{"bob@team-b", "/api/stacks", http.StatusOK}, []any{recs[2].User, recs[2].Path, recs[2].Status}, "a read is on record too")
	assert.Equal(t, "bob@team-b", recs[3].User)
	assert.Equal(t, http.StatusForbidden, recs[3].Status)
	audit.mu.Lock()
	defer audit.mu.Unlock()
	for _, tok := range []string{aliceToken, bobToken} {
		assert.NotContains(t, audit.b.String(), tok)
	}
}

// The proxy's addresses: an address or a CIDR, never every address.
func TestTrustedProxiesNameTheProxy(t *testing.T) {
	got, err := httpapi.ParseTrustedProxies([]string{"10.0.0.5", "10.1.0.0/16", "fd00::1", "::ffff:10.2.0.0/112"})
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.5/32"), netip.MustParsePrefix("10.1.0.0/16"),
		netip.MustParsePrefix("fd00::1/128"), netip.MustParsePrefix("10.2.0.0/16")}, got)
	for _, bad := range []string{"0.0.0.0/0", "::/0", "::ffff:0.0.0.0/96", "proxy.example"} {
		_, err := httpapi.ParseTrustedProxies([]string{bad})
		assert.Error(t, err, bad)
	}
	_, err = httpapi.ParseTrustedProxies(nil)
	assert.Error(t, err)
}

// A users file is refused whole on any problem, each at its key: a name or token used twice, a
// hash that is not one, a user with no stack, a bad pattern (a hostname pattern with a wildcard
// anywhere but the whole leftmost label), an unknown key.
func TestAUsersFileIsCheckedKeyByKey(t *testing.T) {
	_, err := httpapi.ParseUsers([]byte(`users:
  - name: alice
    tokenSHA256: ` + sha(aliceToken) + `
    stacks: ["team-a-*"]
  - name: alice
    tokenSHA256: ` + sha(aliceToken) + `
    stacks: ["["]
  - name: "bad name"
    tokenSHA256: abc
    namespaces: ["team-c"]
    hostnames: ["team-a-*.example.com", "*.team-c.example.com", "M3.Team-C.example.com"]
`))
	require.Error(t, err)
	for _, want := range []string{
		// A wildcard inside a label would reach into other teams' domains (team-a-x.team-b.example.com).
		`users[2].hostnames[0]: "team-a-*.example.com" is not a hostname pattern`,
		`users[2].hostnames[2]: "M3.Team-C.example.com" is not a hostname pattern`,
		`users[1].name: "alice" is users[0]'s too`,
		"users[1].tokenSHA256: the token of users[0] too",
		`users[1].stacks[0]: "[" is not a pattern`,
		`users[2].name: "bad name" is not a user name`,
		"users[2].tokenSHA256: 64 hex digits",
		"users[2].stacks: no stack",
	} {
		assert.Contains(t, err.Error(), want)
	}
	assert.NotContains(t, err.Error(), "users[2].hostnames[1]", "*.<domain> is a pattern")
	_, err = httpapi.ParseUsers([]byte("users:\n  - name: a\n    token: plain\n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "field token not found")
	_, err = httpapi.ParseUsers([]byte("users: []\n"))
	assert.EqualError(t, err, "users: no user")
}

// Behind the site's authenticating proxy, the user is the one its header names, for a connection
// from the proxy only: through a real reverse proxy (which overwrites whatever the client sent)
// carol reaches her stacks with no token; the proxy without the header, or naming nobody, is
// refused; a client reaching the portal around the proxy cannot claim a name with the header.
func TestBehindAnAuthenticatingProxyTheUserIsTheProxys(t *testing.T) {
	portal.FakePulumiStacks(t, "team-a-agg", "team-c-agg")
	users, err := httpapi.ParseUsers([]byte(`users:
  - name: carol@team-c
    stacks: ["team-c-*"]
    namespaces: ["team-c"]
  - name: alice@team-a
    tokenSHA256: ` + sha(aliceToken) + `
    stacks: ["team-a-*"]
`))
	require.NoError(t, err)
	srv := httpapi.NewServerForUsers(t.Context(), portal.NewTestManager(t), users)
	audit := &lockedBuffer{}
	srv.AuditLog = audit
	from, err := httpapi.ParseTrustedProxies([]string{"::ffff:127.0.0.1"})
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, from, "a mapped address is its IPv4 form")
	srv.Proxy = &httpapi.ProxyIdentity{Header: "X-Forwarded-Email", From: from}
	backend := httptest.NewServer(srv.Handler())
	t.Cleanup(backend.Close)
	target, err := url.Parse(backend.URL)
	require.NoError(t, err)
	// The proxy: it has signed its user in (here: whoever its own header names) and says who,
	// overwriting what the client sent.
	var signedIn, appends atomic.Value
	signedIn.Store("carol@team-c")
	appends.Store(false)
	proxy := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		pr.SetURL(target)
		if !appends.Load().(bool) {
			pr.Out.Header.Del("X-Forwarded-Email")
		}
		if name := signedIn.Load().(string); name != "" {
			pr.Out.Header.Add("X-Forwarded-Email", name)
		}
	}})
	t.Cleanup(proxy.Close)
	get := func(base, path string, header map[string]string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	code, body := get(proxy.URL, "/api/stacks", map[string]string{"X-Forwarded-Email": "alice@team-a"})
	require.Equal(t, http.StatusOK, code, body)
	assert.JSONEq(t, `[{"name":"team-c-agg"}]`, body, "the proxy's user, not the one the client claimed")
	code, body = get(proxy.URL, "/api/stacks/team-a-agg", nil)
	assert.Equal(t, http.StatusForbidden, code, body)
	assert.Contains(t, body, "user carol@team-c may not reach stack team-a-agg")

	// A proxy that adds its header to the client's instead of replacing it: the client's value
	// would come first, so two values are refused.
	appends.Store(true)
	code, body = get(proxy.URL, "/api/stacks", map[string]string{"X-Forwarded-Email": "alice@team-a"})
	assert.Equal(t, http.StatusUnauthorized, code, body)
	assert.Contains(t, body, "the proxy sent 2 values of X-Forwarded-Email")
	appends.Store(false)

	signedIn.Store("mallory@elsewhere")
	code, body = get(proxy.URL, "/api/stacks", nil)
	assert.Equal(t, http.StatusUnauthorized, code, body)
	assert.Contains(t, body, `X-Forwarded-Email \"mallory@elsewhere\" is no user of this portal`)
	signedIn.Store("")
	code, body = get(proxy.URL, "/api/stacks", map[string]string{"Authorization": "Bearer " + aliceToken})
	assert.Equal(t, http.StatusUnauthorized, code, "from the proxy only its header counts: %s", body)
	assert.Contains(t, body, "the proxy sent no X-Forwarded-Email")

	// Around the proxy (a connection from an address it does not have): the header is ignored,
	// and a token signs in as usual.
	h := srv.Handler()
	around := func(header map[string]string) (int, string) {
		req := httptest.NewRequest(http.MethodGet, "/api/stacks", nil)
		req.RemoteAddr = "198.51.100.7:40000"
		for k, v := range header {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	code, body = around(map[string]string{"X-Forwarded-Email": "carol@team-c"})
	assert.Equal(t, http.StatusUnauthorized, code, body)
	code, body = around(map[string]string{"X-Forwarded-Email": "carol@team-c", "Authorization": "Bearer " + aliceToken})
	assert.Equal(t, http.StatusOK, code, body)
	assert.JSONEq(t, `[{"name":"team-a-agg"}]`, body)

	var who []string
	for _, r := range audit.records() {
		who = append(who, fmt.Sprintf("%s %d", r.User, r.Status))
	}
	assert.Contains(t, who, "carol@team-c 403")
	assert.Contains(t, who, " 401")
}

// The portal's caps answer 429 over HTTP, before anything is created: a new stack beyond
// -max-stacks (the backend's stacks counted), and an operation beyond -max-operations while
// others hold every place.
func TestThePortalsCapsAnswerTooManyRequests(t *testing.T) {
	cli := portal.FakePulumiStacks(t, "team-a-agg")
	users, err := httpapi.SingleUser("admin", testBearer)
	require.NoError(t, err)
	m := portal.NewTestManagerWith(t, func(o *portal.Options) { o.MaxStacks, o.MaxOperations = 1, 1 })
	h := httpapi.NewServerForUsers(t.Context(), m, users).Handler()
	body := map[string]any{"base": "agg", "hfToken": "hf_test", "config": map[string]any{"namespace": map[string]any{"name": "team-a"}}}

	code, resp := call(h, http.MethodPost, "/api/stacks/team-a-new/preview", testBearer, body)
	assert.Equal(t, http.StatusTooManyRequests, code, resp)
	assert.Contains(t, resp, "the portal is at its limit of 1 stacks")
	for _, c := range cli.Calls(t) {
		assert.NotContains(t, c, "stack init", "no stack was created")
	}

	release, err := portal.Hold(t.Context(), m, "team-a-agg", "up")
	require.NoError(t, err)
	defer release()
	code, resp = call(h, http.MethodPost, "/api/stacks/team-a-agg/refresh", testBearer, nil)
	assert.Equal(t, http.StatusConflict, code, "the same stack is busy: %s", resp)
	code, resp = call(h, http.MethodPost, "/api/stacks/team-b-agg/refresh", testBearer, nil)
	assert.Equal(t, http.StatusTooManyRequests, code, "another stack waits for no place: %s", resp)
	assert.Contains(t, resp, "the portal is at its limit of 1 operations")
}

// Sign-ins cannot grow the server's sessions without bound: beyond MaxSessions the session that
// would end first ends.
func TestSessionsAreCapped(t *testing.T) {
	portal.FakePulumiStacks(t, "team-a-agg")
	users, err := httpapi.SingleUser("admin", testBearer)
	require.NoError(t, err)
	srv := httpapi.NewServerForUsers(t.Context(), portal.NewTestManager(t), users)
	srv.MaxSessions = 2
	h := srv.Handler()
	login := func() *http.Cookie {
		req := httptest.NewRequest(http.MethodPost, "/login", strings.NewReader(url.Values{"token": {testBearer}}.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusSeeOther, rec.Code)
		return rec.Result().Cookies()[0]
	}
	signedIn := func(c *http.Cookie) bool {
		req := httptest.NewRequest(http.MethodGet, "/api/stacks", nil)
		req.AddCookie(c)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code == http.StatusOK
	}
	first := login()
	time.Sleep(2 * time.Millisecond) // the sessions' ends are apart
	second := login()
	time.Sleep(2 * time.Millisecond)
	third := login()
	assert.False(t, signedIn(first), "the oldest session ended")
	assert.True(t, signedIn(second))
	assert.True(t, signedIn(third))
}

// A stack is bound to the namespace it deploys into: a user whose stack pattern happens to match
// another team's stack name ("team-a*" and "team-ab-prod") may not destroy, refresh or move it,
// for their grant does not cover its namespace; the refusal comes before any CLI runs.
func TestAStackIsBoundToItsNamespace(t *testing.T) {
	cli := portal.FakePulumiStacks(t, "team-ab-prod")
	state := t.TempDir()
	dir := filepath.Join(state, "workspaces", "team-ab-prod")
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.team-ab-prod.yaml"), []byte("config:\n  minimax-m3:profile: agg\n  minimax-m3:namespace:\n    name: team-ab\n"), 0o600))
	users, err := httpapi.ParseUsers([]byte(`users:
  - name: alice@team-a
    tokenSHA256: ` + sha(aliceToken) + `
    stacks: ["team-a*"]
    namespaces: ["team-a"]
`))
	require.NoError(t, err)
	srv := httpapi.NewServerForUsers(t.Context(), portal.NewTestManagerWith(t, func(o *portal.Options) { o.StateDir = state }), users)
	audit := &lockedBuffer{}
	srv.AuditLog = audit
	h := srv.Handler()
	before := len(cli.Calls(t))
	for _, op := range []string{"destroy", "refresh", "recover", "preview", "up", "cancel"} {
		code, body := call(h, http.MethodPost, "/api/stacks/team-ab-prod/"+op, aliceToken, map[string]any{"base": "agg", "config": map[string]any{"namespace": map[string]any{"name": "team-a"}}})
		assert.Equal(t, http.StatusForbidden, code, "%s: %s", op, body)
		assert.Contains(t, body, `stack team-ab-prod deploys into namespace \"team-ab\", which user alice@team-a may not deploy into`, op)
	}
	assert.Len(t, cli.Calls(t), before, "a refused request runs no CLI")
}

// The audit log fails closed: when its record cannot be written, a request is refused (503)
// before it is served, a read as much as an operation, and nothing runs.
func TestTheAuditLogFailsClosed(t *testing.T) {
	cli := portal.FakePulumiStacks(t, "team-a-agg")
	users, err := httpapi.ParseUsers([]byte("users:\n  - name: alice@team-a\n    tokenSHA256: " + sha(aliceToken) + "\n    stacks: [\"team-a-*\"]\n    namespaces: [\"team-a\"]\n"))
	require.NoError(t, err)
	srv := httpapi.NewServerForUsers(t.Context(), portal.NewTestManager(t), users)
	srv.AuditLog = failingWriter{}
	h := srv.Handler()
	before := len(cli.Calls(t))
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, "/api/stacks"},
		{http.MethodGet, "/api/stacks/team-a-agg"},
		{http.MethodPost, "/api/stacks/team-a-agg/destroy"},
		{http.MethodPost, "/api/stacks/team-a-new/preview"},
	} {
		code, body := call(h, r.method, r.path, aliceToken, map[string]any{"base": "agg", "config": map[string]any{"namespace": map[string]any{"name": "team-a"}}})
		assert.Equal(t, http.StatusServiceUnavailable, code, "%s %s: %s", r.method, r.path, body)
		assert.Contains(t, body, "audit log cannot be written")
	}
	assert.Len(t, cli.Calls(t), before, "nothing ran")

	// Reads are on record, with their user.
	ok := httpapi.NewServerForUsers(t.Context(), portal.NewTestManager(t), users)
	log := &lockedBuffer{}
	ok.AuditLog = log
	code, _ := call(ok.Handler(), http.MethodGet, "/api/stacks", aliceToken, nil)
	require.Equal(t, http.StatusOK, code)
	recs := log.records()
	require.Len(t, recs, 2)
	assert.Equal(t, "received", recs[0].Phase)
	assert.Equal(t, httpapi.AuditRecord{Time: recs[1].Time, User: "alice@team-a", Remote: recs[1].Remote, Method: "GET", Path: "/api/stacks", Status: 200}, recs[1])
}

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }
