package integration

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"minimax-m3/portal"
	"minimax-m3/portal/pko"
	"minimax-m3/tests/framework/poll"
)

// watchCommandLines scans every process's command line until stop, and returns those holding s,
// one per process.
func watchCommandLines(s string) (stop func() []string) {
	done := make(chan struct{})
	var mu sync.Mutex
	found := map[string]string{}
	go func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
			for _, p := range procs {
				b, err := os.ReadFile(p)
				if err == nil && strings.Contains(string(b), s) {
					mu.Lock()
					found[p] = strings.ReplaceAll(string(b), "\x00", " ")
					mu.Unlock()
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
	}()
	return func() []string {
		close(done)
		mu.Lock()
		defer mu.Unlock()
		return slices.Collect(maps.Values(found))
	}
}

// A request is validated with the program's rules before any engine starts; preview saves a plan
// that up then runs; outputs, history and refresh read the stack; the token is in no command line,
// event, result or error; the stack's config lives in its own workspace for the next operation.
func TestPortalLifecycle(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	stateDir := t.TempDir()
	m := newPortalAt(t, stateDir)

	bad := portalRequest("agg", "Team A", "portal")
	bad.Config.Worker.Replicas = 0
	bad.Config.Namespace.Name = ""
	_, err := m.Up(ctx, bad, portal.RunOptions{})
	var invalid *portal.InvalidRequestError
	require.ErrorAs(t, err, &invalid)
	var keys []string
	for _, p := range invalid.Problems {
		keys = append(keys, p.Key)
	}
	assert.Equal(t, []string{"stack", "namespace.name", "worker.replicas"}, keys)
	stacks, err := m.Stacks(ctx)
	require.NoError(t, err)
	assert.Empty(t, stacks, "nothing was created")

	r := portalRequest("agg", "agg-team-a", "portal")
	destroyAfter(t, m, r.Name(), "portal")
	plan := filepath.Join(t.TempDir(), "plan.json")
	var events []portal.Event
	var mu sync.Mutex
	progress := func(e portal.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }

	scan := watchCommandLines(portalToken)
	// The scan sees a short process that does put the token on its command line.
	require.NoError(t, exec.Command("sh", "-c", "sleep 0.3", "control-"+portalToken).Run())
	pre, err := m.Preview(ctx, r, portal.RunOptions{Plan: plan, Progress: progress})
	require.NoError(t, err)
	assert.FileExists(t, plan)
	assert.Equal(t, 17, pre.Changes["create"], "%+v", pre.Changes)
	names := map[string]string{}
	for _, s := range pre.Steps {
		names[s.Name] = s.Op
	}
	assert.Equal(t, "create", names["graph"])
	assert.Equal(t, "create", names["model-download"])

	up, err := m.Up(ctx, r, portal.RunOptions{Plan: plan, Progress: progress})
	require.NoError(t, err)
	leaks := scan()
	require.Len(t, leaks, 1, "only the control process: %v", leaks)
	assert.Contains(t, leaks[0], "control-"+portalToken)
	assert.Equal(t, 17, up.Changes["create"])
	assert.Equal(t, portal.Outputs{Namespace: "portal", GraphName: aggGraph, FrontendService: aggGraph + "-frontend", FrontendPort: 8000,
		FrontendURL: "http://" + aggGraph + "-frontend.portal.svc.cluster.local:8000", GPUCount: 12,
		Model: "nvidia/MiniMax-M3-NVFP4", ServedModelName: "nvidia/MiniMax-M3-NVFP4", ModelRevision: r.Config.Model.Revision,
		DraftModel: r.Config.Model.Draft.Name, DraftRevision: r.Config.Model.Draft.Revision, SpeculativeMode: "real",
		CacheClaimName: "shared-model-cache", ComputeDomain: aggGraph + "-cd"}, up.Outputs)

	// Progress: each resource started and done, the waits in between.
	mu.Lock()
	status := map[string][]string{}
	for _, e := range events {
		if e.Name == "graph" || e.Name == "model-download" {
			status[e.Name] = append(status[e.Name], e.Status)
		}
	}
	all, _ := json.Marshal(events)
	mu.Unlock()
	assert.NotContains(t, string(all), portalToken)
	for _, name := range []string{"graph", "model-download"} {
		require.NotEmpty(t, status[name], name)
		assert.Equal(t, "started", status[name][0], name)
		assert.Equal(t, "done", status[name][len(status[name])-1], name)
	}

	// The stack's config is kept with it, in its workspace: a new manager on the same state (a
	// restarted portal) reads the stack.
	stackFile, err := os.ReadFile(filepath.Join(stateDir, "workspaces", "agg-team-a", "Pulumi.agg-team-a.yaml"))
	require.NoError(t, err)
	assert.Contains(t, string(stackFile), `minimax-m3:namespace: '{"name":"portal"}'`)
	assert.Contains(t, string(stackFile), "minimax-m3:hfToken:\n    secure:")
	assert.NotContains(t, string(stackFile), portalToken)

	out, err := newPortalAt(t, stateDir).Outputs(ctx, "agg-team-a")
	require.NoError(t, err)
	assert.Equal(t, up.Outputs, out)
	history, err := m.History(ctx, "agg-team-a", 10, 1)
	require.NoError(t, err)
	require.Len(t, history, 1)
	assert.Equal(t, "update", history[0].Kind)
	assert.Equal(t, "succeeded", history[0].Result)
	_, err = m.Refresh(ctx, "agg-team-a", portal.RunOptions{})
	require.NoError(t, err)

	// Outputs and history decrypt nothing (the token stays encrypted): a portal with the wrong
	// passphrase reads them, while a preview, which needs the token, cannot run with it.
	wrong := newPortalWithPassphrase(t, stateDir, "not-the-passphrase")
	out, err = wrong.Outputs(ctx, "agg-team-a")
	require.NoError(t, err)
	assert.Equal(t, up.Outputs, out)
	history, err = wrong.History(ctx, "agg-team-a", 10, 1)
	require.NoError(t, err)
	assert.Len(t, history, 2, "the update and the refresh")
	noToken := r
	noToken.HFToken = ""
	_, err = wrong.Preview(ctx, noToken, portal.RunOptions{})
	require.ErrorContains(t, err, "passphrase")

	// A plan approved before a config change is not what runs after it: refused at plan before
	// anything is touched (the engine would refuse it too, once the config was written).
	_, err = m.Preview(ctx, r, portal.RunOptions{Plan: plan})
	require.NoError(t, err)
	r.Config.Worker.Replicas = 2
	_, err = m.Up(ctx, r, portal.RunOptions{Plan: plan})
	invalid = nil
	require.ErrorAs(t, err, &invalid)
	assert.Equal(t, "plan", invalid.Problems[0].Key)
	assert.Contains(t, err.Error(), "saved by a preview of another request")
	assert.NotContains(t, err.Error(), portalToken)

	_, err = m.Outputs(ctx, "no-such-stack")
	require.ErrorIs(t, err, portal.ErrUnknownStack)
}

// One operation per stack: a second up on a busy stack gets Busy at once, ups on two stacks run
// side by side.
func TestPortalConcurrency(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	m := newPortal(t)
	a := portalRequest("agg", "agg-busy", "portal-busy")
	b := portalRequest("disagg", "disagg-side", "portal-side")
	destroyAfter(t, m, a.Name(), "portal-busy")
	destroyAfter(t, m, b.Name(), "portal-side")

	var wg sync.WaitGroup
	errs := make([]error, 3)
	started := make(chan struct{})
	var once sync.Once
	first := make(chan struct{})
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer close(first)
		_, errs[0] = m.Up(ctx, a, portal.RunOptions{Progress: func(portal.Event) { once.Do(func() { close(started) }) }})
	}()
	go func() {
		defer wg.Done()
		_, errs[1] = m.Up(ctx, b, portal.RunOptions{})
	}()
	select {
	case <-started:
	case <-first: // it ended before its first event: its error says why
		wg.Wait()
		require.NoError(t, errs[0])
	}
	_, errs[2] = m.Up(ctx, a, portal.RunOptions{})
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.ErrorIs(t, errs[2], portal.ErrBusy)
	var busy *portal.BusyError
	require.True(t, errors.As(errs[2], &busy))
	assert.Equal(t, "up", busy.Operation)
	history, err := m.History(ctx, "agg-busy", 10, 1)
	require.NoError(t, err)
	assert.Len(t, history, 1, "exactly one run")

	// Waiting instead of Busy: the second up runs after the first.
	_, err = m.Up(ctx, a, portal.RunOptions{Wait: true})
	require.NoError(t, err)
}

// Cancelling an up while it waits for the graph (here no operator will ever make it Ready) leaves a
// stack the next up completes.
func TestPortalCancel(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	m := newPortal(t)
	r := portalRequest("agg", "agg-cancel", "portal-cancel")
	r.Config.Readiness.WaitForReady = true
	destroyAfter(t, m, r.Name(), "portal-cancel")
	waiting := make(chan struct{})
	var once sync.Once
	errc := make(chan error, 1)
	go func() {
		_, err := m.Up(ctx, r, portal.RunOptions{Progress: func(e portal.Event) {
			if e.Name == "graph" && e.Status == "started" {
				once.Do(func() { close(waiting) })
			}
		}})
		errc <- err
	}()
	select {
	case <-waiting:
	case err := <-errc:
		require.Fail(t, "the up ended before it waited for the graph", "%v", err)
	}
	require.NoError(t, poll.Until(ctx, time.Minute, 100*time.Millisecond, "the graph is created: its wait begins", func(ctx context.Context) (bool, error) {
		_, live, err := tryGetOn(ctx, cluster.client, graphGVK, "portal-cancel", aggGraph)
		return live, err
	}))
	require.Equal(t, "up", m.Running("agg-cancel"))
	require.NoError(t, m.Cancel("agg-cancel"))
	require.Error(t, <-errc)

	// The next up (one that does not wait for a Ready no operator here gives) completes.
	r.Config.Readiness.WaitForReady = false
	up, err := m.Up(ctx, r, portal.RunOptions{})
	require.NoError(t, err)
	assert.Equal(t, aggGraph, up.Outputs.GraphName)
}

// A stack that held a token switches to a Secret the site brought (huggingFace.existingSecret):
// the request needs no token, and the stored one is removed from the stack's config rather than
// refused as "both".
func TestPortalSwitchToAnExistingSecretClearsTheStoredToken(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	stateDir := t.TempDir()
	m := newPortalAt(t, stateDir)
	r := portalRequest("agg", "agg-own-secret", "portal-own-secret")
	_, err := m.Preview(ctx, r, portal.RunOptions{})
	require.NoError(t, err)
	stackFile := filepath.Join(stateDir, "workspaces", "agg-own-secret", "Pulumi.agg-own-secret.yaml")
	b, err := os.ReadFile(stackFile)
	require.NoError(t, err)
	require.Contains(t, string(b), "minimax-m3:hfToken:\n    secure:")

	r.HFToken = ""
	r.Config.HuggingFace.ExistingSecret = true
	pre, err := m.Preview(ctx, r, portal.RunOptions{})
	require.NoError(t, err)
	assert.NotEmpty(t, pre.Changes)
	b, err = os.ReadFile(stackFile)
	require.NoError(t, err)
	assert.NotContains(t, string(b), "hfToken", "the stored token removed")
	assert.Contains(t, string(b), "existingSecret")

	// Back to a token of the stack's own: a request without one is refused, naming the keys.
	r.Config.HuggingFace.ExistingSecret = false
	_, err = m.Preview(ctx, r, portal.RunOptions{})
	var invalid *portal.InvalidRequestError
	require.ErrorAs(t, err, &invalid)
	assert.Equal(t, "hfToken", invalid.Problems[0].Key)
}

// An up runs the PR check's policies on a preview first: a change that restarts the workers needs
// the same explicit consent a pull request's label gives (allowRoll), and without it nothing is
// applied; the preview says what it would roll.
func TestPortalUpNeedsConsentToRollWorkers(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	m := newPortal(t)
	r := portalRequest("agg", "agg-consent", "portal-consent")
	destroyAfter(t, m, r.Name(), "portal-consent")
	_, err := m.Up(ctx, r, portal.RunOptions{})
	require.NoError(t, err, "a new stack rolls nothing")
	g := mustGet(t, graphGVK, "portal-consent", aggGraph)
	generation := g.GetGeneration()

	r.HFToken = ""
	r.Config.Worker.TerminationGracePeriodSeconds = 120
	pre, err := m.Preview(ctx, r, portal.RunOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"Worker"}, pre.Rolls)
	assert.Empty(t, pre.Violations)

	_, err = m.Up(ctx, r, portal.RunOptions{})
	var invalid *portal.InvalidRequestError
	require.ErrorAs(t, err, &invalid)
	require.Len(t, invalid.Problems, 1)
	assert.Equal(t, "allowRoll", invalid.Problems[0].Key)
	assert.Contains(t, invalid.Problems[0].Message, "Worker of DynamoGraphDeployment portal-consent/"+aggGraph+" restarts (")
	assert.Contains(t, invalid.Problems[0].Message, "terminationGracePeriodSeconds")
	g = mustGet(t, graphGVK, "portal-consent", aggGraph)
	assert.Equal(t, generation, g.GetGeneration(), "nothing applied")

	_, err = m.Up(ctx, r, portal.RunOptions{AllowRoll: "Frontend"})
	require.ErrorAs(t, err, &invalid, "consent for another component is not consent for the workers")

	// The operator runner, gated by this portal's checks: the same refusal, nothing written; with
	// consent, the Stack.
	installPKOCRDs(t)
	kube, dyn := kubeClients(t, cluster.kubeconfig)
	_, err = kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "pko-consent"}}, metav1.CreateOptions{})
	require.NoError(t, err)
	runner := &pko.Runner{Kube: kube, Dynamic: dyn, Namespace: "pko-consent", Gate: m,
		ProjectRepo: "https://git.example.com/platform/minimax-m3.git", Commit: "0123456789abcdef0123456789abcdef01234567",
		ServiceAccountName: "pulumi", Image: workspaceImage}
	rr := r
	rr.HFToken = portalToken // the runner hands every Stack its token's Secret
	_, err = runner.Apply(ctx, rr, pko.ApplyOptions{})
	require.ErrorAs(t, err, &invalid)
	assert.Equal(t, "allowRoll", invalid.Problems[0].Key, "%v", err)
	_, err = dyn.Resource(pko.StackResource).Namespace("pko-consent").Get(ctx, r.Name(), metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "a refused request writes no Stack")
	_, err = kube.CoreV1().Secrets("pko-consent").Get(ctx, pko.TokenSecretName(r.Name()), metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "nor its token's Secret")
	_, err = runner.Apply(ctx, rr, pko.ApplyOptions{AllowRoll: "Worker"})
	require.NoError(t, err)
	_, err = dyn.Resource(pko.StackResource).Namespace("pko-consent").Get(ctx, r.Name(), metav1.GetOptions{})
	require.NoError(t, err, "with consent, the Stack")
	g = mustGet(t, graphGVK, "portal-consent", aggGraph)
	assert.Equal(t, generation, g.GetGeneration(), "the gate's preview applied nothing")

	var events []portal.Event
	var mu sync.Mutex
	_, err = m.Up(ctx, r, portal.RunOptions{AllowRoll: "Worker", Progress: func(e portal.Event) { mu.Lock(); events = append(events, e); mu.Unlock() }})
	require.NoError(t, err)
	g = mustGet(t, graphGVK, "portal-consent", aggGraph)
	assert.Greater(t, g.GetGeneration(), generation, "applied with consent")
	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, events)
	assert.Equal(t, "policy", events[0].Status)
	assert.Contains(t, events[0].Message, "policies passed on a preview")
	assert.Contains(t, events[0].Message, "Worker=yes")
}
