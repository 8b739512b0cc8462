package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/portal"
	"minimax-m3/portal/httpapi"
	"minimax-m3/tests/framework/poll"
)

// portalProcess is cmd/portal running with the tests' cluster and passphrase, its stderr kept.
type portalProcess struct {
	cmd         *exec.Cmd
	addr, token string
	mu          sync.Mutex
	stderr      []string
}

func startPortalProcess(t *testing.T, bin, stateDir string) *portalProcess {
	t.Helper()
	p := &portalProcess{cmd: exec.Command(bin, "-addr", "127.0.0.1:0", "-state-dir", stateDir, "-project-dir", cluster.root)}
	p.cmd.Env = append(os.Environ(), "KUBECONFIG="+cluster.kubeconfig, "PULUMI_CONFIG_PASSPHRASE=portal-tests")
	stderr, err := p.cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() { _ = p.cmd.Process.Kill(); _ = p.cmd.Wait() })
	sc := bufio.NewScanner(stderr)
	for (p.token == "" || p.addr == "") && sc.Scan() {
		line := sc.Text()
		p.mu.Lock()
		p.stderr = append(p.stderr, line)
		p.mu.Unlock()
		if _, after, ok := strings.Cut(line, "random token: "); ok {
			p.token = after
		}
		if after, ok := strings.CutPrefix(line, "serving on "); ok {
			p.addr = after
		}
	}
	go func() {
		for sc.Scan() {
			p.mu.Lock()
			p.stderr = append(p.stderr, sc.Text())
			p.mu.Unlock()
		}
	}()
	require.NotEmpty(t, p.addr, "cmd/portal did not start")
	return p
}

func (p *portalProcess) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.stderr, "\n")
}

func (p *portalProcess) client(t *testing.T) *httpClient {
	return &httpClient{t: t, base: p.addr, token: p.token}
}

// messages are the events' messages.
func messages(events []portal.Event) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.Message)
	}
	return out
}

// processesUnder are the processes whose working directory is under dir: the Pulumi CLI, its
// language host and plugins of a portal's stack workspaces.
func processesUnder(dir string) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err == nil && strings.HasPrefix(cwd, dir+string(filepath.Separator)) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// A portal killed mid-update (SIGKILL to the portal and to the CLI it runs, as an OOM kill or a
// lost node does) leaves the stack locked (the file backend's lock of a process that is gone) and
// an operation pending in its state. The next portal finds both at start, says so in its log, its
// stack list and on its page, and recovers the stack on request (the stale lock removed with
// `pulumi cancel`, the pending operation cleared); then the stack updates again. A lock of
// another host's update is not taken: recovery is refused, naming it.
func TestPortalRecoversWhatAKilledPortalLeft(t *testing.T) {
	parallel(t)
	bin := portalCommand(t)
	stateDir := t.TempDir()
	const stack, ns = "agg-killed", "portal-killed"
	first := startPortalProcess(t, bin, stateDir)
	c := first.client(t)
	site := map[string]any{"namespace": map[string]any{"name": ns},
		"readiness": map[string]any{"timeout": "5m"}, "smokeTest": map[string]any{"enabled": false}}
	code, body := c.do(http.MethodPost, "/api/stacks/"+stack+"/up", map[string]any{"base": "agg", "config": site, "hfToken": portalToken})
	require.Equal(t, http.StatusAccepted, code, string(body))

	// The up waits for a download no Job controller here completes; then everything is killed at
	// once, the Job's creation in flight.
	require.NoError(t, poll.Until(t.Context(), 2*time.Minute, 200*time.Millisecond, "the up created the download Job", func(ctx context.Context) (bool, error) {
		err := cluster.client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "minimax-m3-model-download"}, &batchv1.Job{})
		return err == nil, client.IgnoreNotFound(err)
	}))
	workspaces := filepath.Join(stateDir, "workspaces")
	cli := processesUnder(workspaces)
	require.NotEmpty(t, cli, "the CLI runs in the stack's workspace")
	require.NoError(t, first.cmd.Process.Signal(syscall.SIGKILL))
	for _, pid := range cli {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = first.cmd.Wait()
	require.NoError(t, poll.True(t.Context(), 30*time.Second, 100*time.Millisecond, "the killed CLI's processes are gone", func() bool { return len(processesUnder(workspaces)) == 0 }))

	second := startPortalProcess(t, bin, stateDir)
	c = second.client(t)
	// (A portal without operations: destroy the stack when the test ends.)
	t.Cleanup(func() {
		stop := playControllers(t, cluster.client, ns, controllers{})
		defer stop()
		m := newPortalAt(t, stateDir)
		_, _ = m.Recover(t.Context(), stack, portal.RunOptions{Wait: true})
		_ = m.Destroy(t.Context(), stack, true, portal.RunOptions{Wait: true})
	})
	require.NoError(t, poll.True(t.Context(), time.Minute, 100*time.Millisecond, "the second portal reports the interrupted stack", func() bool {
		return strings.Contains(second.log(), "stack "+stack+" was interrupted")
	}), second.log())
	assert.Regexp(t, "stack "+stack+` was interrupted: 1 lock\(s\), [1-9]\d* pending operation\(s\); POST /api/stacks/`+stack+"/recover clears them", second.log())
	code, body = c.do(http.MethodGet, "/api/stacks", nil)
	require.Equal(t, http.StatusOK, code)
	var list []httpapi.StackInfo
	require.NoError(t, json.Unmarshal(body, &list))
	require.Len(t, list, 1)
	in := list[0].Interrupted
	require.NotNil(t, in, string(body))
	require.Len(t, in.Locks, 1)
	assert.True(t, in.Locks[0].Stale, "the lock's process is gone")
	assert.Contains(t, cli, in.Locks[0].Pid, "the killed CLI's lock")
	assert.True(t, slices.ContainsFunc(in.Pending, func(p string) bool {
		return regexp.MustCompile(`^creating urn:pulumi:agg-killed::minimax-m3::.*Job::model-download$`).MatchString(p)
	}), "the download Job's creation pending: %v", in.Pending)
	code, pageBody := c.do(http.MethodGet, "/", nil)
	require.Equal(t, http.StatusOK, code)
	page := string(pageBody)
	assert.Contains(t, page, "An earlier run left this stack interrupted (recover it: POST api/stacks/"+stack+"/recover)")
	assert.Contains(t, page, "pending: creating urn:pulumi:agg-killed::")

	code, body = c.do(http.MethodPost, "/api/stacks/"+stack+"/recover", nil)
	require.Equal(t, http.StatusAccepted, code, string(body))
	events, errText := c.sse(stack)
	require.Empty(t, errText)
	said := messages(events)
	assert.Contains(t, said, "removing 1 stale lock(s) (pulumi cancel)")
	assert.True(t, slices.ContainsFunc(said, func(m string) bool { return strings.HasPrefix(m, "clearing ") }), "%v", said)
	assert.Contains(t, said, "recovered: the stack is ready for its next update")
	code, body = c.do(http.MethodGet, "/api/stacks", nil)
	require.Equal(t, http.StatusOK, code)
	assert.NotContains(t, string(body), "interrupted")
	locks, _ := os.ReadDir(filepath.Join(stateDir, "state", ".pulumi", "locks", "organization", "minimax-m3", stack))
	assert.Empty(t, locks)

	// Ready for its next update (one that does not wait for what no controller here does).
	site["readiness"] = map[string]any{"timeout": "5m", "waitForReady": false}
	site["modelDownload"] = map[string]any{"waitForCompletion": false}
	code, body = c.do(http.MethodPost, "/api/stacks/"+stack+"/up", map[string]any{"base": "agg", "config": site})
	require.Equal(t, http.StatusAccepted, code, string(body))
	_, errText = c.sse(stack)
	require.Empty(t, errText)

	// Another host's lock (this host cannot run another host's CLI: the test writes its lock file
	// as the file backend does) is an update that may still run: recovery refuses it.
	lockDir := filepath.Join(stateDir, "state", ".pulumi", "locks", "organization", "minimax-m3", stack)
	require.NoError(t, os.MkdirAll(lockDir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(lockDir, "other.json"),
		fmt.Appendf(nil, `{"pid": 4242, "username": "ci", "hostname": "build-host-7", "timestamp": %q}`, time.Now().UTC().Format(time.RFC3339)), 0o644))
	m := newPortalAt(t, stateDir)
	_, err := m.Recover(t.Context(), stack, portal.RunOptions{})
	require.ErrorIs(t, err, portal.ErrBusy)
	assert.Contains(t, err.Error(), "an update of ci@build-host-7 (pid 4242, since ")
	require.NoError(t, os.Remove(filepath.Join(lockDir, "other.json")))
}
