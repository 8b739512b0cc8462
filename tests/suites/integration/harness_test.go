package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/automation"
	"minimax-m3/config"
	kcluster "minimax-m3/internal/cluster"
	"minimax-m3/manifest"
	"minimax-m3/portal"
	"minimax-m3/tests/framework/rackbox"
)

// The suite's shared helpers for the plain API server, the Pulumi stacks and the portal; the rack
// box's are in boxharness_test.go. Test files hold tests, and helpers only their own tests use.

// testToken is the Hugging Face token the stacks get; it must never appear in plain text.
const testToken = "hf_integrationTokenNeverPlain"

var (
	graphGVK         = schema.GroupVersionKind{Group: "nvidia.com", Version: "v1beta1", Kind: "DynamoGraphDeployment"}
	computeDomainGVK = schema.GroupVersionKind{Group: "resource.nvidia.com", Version: "v1beta1", Kind: "ComputeDomain"}
	namespaceGVK     = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
	secretGVK        = schema.GroupVersionKind{Version: "v1", Kind: "Secret"}
	configMapGVK     = schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	pvcGVK           = schema.GroupVersionKind{Version: "v1", Kind: "PersistentVolumeClaim"}
	jobGVK           = schema.GroupVersionKind{Group: "batch", Version: "v1", Kind: "Job"}
)

const (
	aggGraph    = "minimax-m3-agg-gb200-agentic"
	disaggGraph = "minimax-m3-disagg-gb200-agentic"
)

// testStack is one stack on a fresh file backend, working on a temp copy of the project.
type testStack struct {
	t     *testing.T
	name  string
	ns    string
	dir   string
	env   map[string]string
	stack automation.Stack
	log   *syncBuffer
}

// siteConfig is what every test stack adds to the committed stack file: its own namespace, the
// token, and timeouts short enough for tests.
func siteConfig(ns string) auto.ConfigMap {
	return auto.ConfigMap{
		"minimax-m3:namespace.name":        {Value: ns},
		"minimax-m3:hfToken":               {Value: testToken, Secret: true},
		"minimax-m3:modelDownload.timeout": {Value: "3m"},
		"minimax-m3:readiness.timeout":     {Value: "3m"},
		// The recipe's registries, and the box's own images.
		"minimax-m3:imageRegistries": {Value: `["nvcr.io", "docker.io", "` + rackbox.Registry + `"]`},
		// On by default; off where nothing runs its Job (the plain API server). The rack box turns it
		// on: its pods end through a kwok stage.
		"minimax-m3:smokeTest.enabled": {Value: "false"},
	}
}

func newStack(t *testing.T, stackName, ns string, extra auto.ConfigMap) *testStack {
	t.Helper()
	return makeStack(t, cluster.kubeconfig, stackName, ns, extra, cluster.client)
}

// makeStack is newStack on the cluster of kubeconfig. With gc, a client of that cluster, the
// test's cleanup plays the garbage collector while it destroys the stack, which a cluster whose
// controllers run (the rack box) must not: gc is nil there.
func makeStack(t *testing.T, kubeconfig, stackName, ns string, extra auto.ConfigMap, gc client.Client) *testStack {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, automation.CopyProject(cluster.root, dir))
	cfg := siteConfig(ns)
	for k, v := range extra {
		cfg[k] = v
	}
	ctx := context.Background()
	env := pulumiEnv(t)
	env["KUBECONFIG"] = kubeconfig
	s, err := automation.NewStack(ctx, automation.Options{
		ProjectDir: dir,
		Stack:      stackName,
		Config:     cfg,
		EnvVars:    env,
	})
	require.NoError(t, err)
	ts := &testStack{t: t, name: stackName, ns: ns, dir: dir, env: env, stack: s, log: &syncBuffer{}}
	t.Cleanup(func() {
		// Each test leaves nothing behind in its cluster but its retained claim.
		if gc != nil {
			stop := playControllers(t, gc, ns, controllers{})
			defer stop()
		}
		_, _ = s.Destroy(ctx, optdestroy.ProgressStreams(ts.log))
	})
	return ts
}

// pulumiEnv is the environment of the Pulumi CLI and the provider: a file backend of the test's own,
// the built plugins, and the local API server.
func pulumiEnv(t *testing.T) map[string]string {
	return map[string]string{
		"PULUMI_BACKEND_URL":       "file://" + t.TempDir(),
		"PULUMI_CONFIG_PASSPHRASE": "integration-tests",
		"PULUMI_HOME":              filepath.Join(cluster.root, ".toolchain", "pulumi-home"),
		"PULUMI_SKIP_UPDATE_CHECK": "true",
		"KUBECONFIG":               cluster.kubeconfig,
		"PATH":                     os.Getenv("PATH"),
	}
}

// operation is one resource's step in an update: its type and what happened to it.
type operation struct{ Type, Name, Op string }

// changes collects the steps of an update or preview that are not "same".
func collect(ch <-chan events.EngineEvent, out *[]operation, done *sync.WaitGroup) {
	defer done.Done()
	for e := range ch {
		if e.ResourcePreEvent == nil {
			continue
		}
		m := e.ResourcePreEvent.Metadata
		// The program's read of its own stack's outputs (its identity) changes nothing.
		if string(m.Op) == "same" || m.Type == "pulumi:pulumi:Stack" || m.Type == "pulumi:providers:kubernetes" || m.Type == "pulumi:pulumi:StackReference" {
			continue
		}
		*out = append(*out, operation{Type: m.Type, Name: m.URN[strings.LastIndex(m.URN, "::")+2:], Op: string(m.Op)})
	}
}

// up runs `pulumi up` and returns its result and the steps that changed something.
func (s *testStack) up(ctx context.Context) (auto.UpResult, []operation, error) {
	ch := make(chan events.EngineEvent)
	var ops []operation
	var wg sync.WaitGroup
	wg.Add(1)
	go collect(ch, &ops, &wg)
	res, err := s.stack.Up(ctx, optup.EventStreams(ch), optup.ProgressStreams(s.log), optup.ErrorProgressStreams(s.log))
	wg.Wait()
	return res, ops, err
}

// preview runs `pulumi preview` and returns the steps it proposes.
func (s *testStack) preview(ctx context.Context, opts ...optpreview.Option) ([]operation, error) {
	ch := make(chan events.EngineEvent)
	var ops []operation
	var wg sync.WaitGroup
	wg.Add(1)
	go collect(ch, &ops, &wg)
	opts = append(opts, optpreview.EventStreams(ch), optpreview.ProgressStreams(s.log), optpreview.ErrorProgressStreams(s.log))
	_, err := s.stack.Preview(ctx, opts...)
	wg.Wait()
	return ops, err
}

// export is `pulumi stack export`, as a user would share it (secrets stay encrypted).
func (s *testStack) export() string {
	s.t.Helper()
	cmd := exec.Command("pulumi", "stack", "export", "--stack", s.name, "--cwd", s.dir, "--non-interactive")
	cmd.Env = os.Environ()
	for k, v := range s.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.Output()
	require.NoError(s.t, err)
	return string(out)
}

// stored is the live object the stack's state holds for the resource of type typ (the last one
// the provider recorded), from `pulumi stack export`.
func (s *testStack) stored(typ string) *unstructured.Unstructured {
	s.t.Helper()
	var state struct {
		Deployment struct {
			Resources []struct {
				Type    string         `json:"type"`
				Outputs map[string]any `json:"outputs"`
			} `json:"resources"`
		} `json:"deployment"`
	}
	require.NoError(s.t, json.Unmarshal([]byte(s.export()), &state))
	for _, r := range state.Deployment.Resources {
		if r.Type == typ {
			return &unstructured.Unstructured{Object: r.Outputs}
		}
	}
	require.Failf(s.t, "not in the state", "no %s in stack %s", typ, s.name)
	return nil
}

// cli runs the real Pulumi CLI on the stack's project copy, as a user would.
func (s *testStack) cli(args ...string) (string, error) {
	cmd := exec.Command("pulumi", append(args, "--stack", s.name, "--cwd", s.dir, "--non-interactive")...)
	cmd.Env = os.Environ()
	for k, v := range s.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (s *testStack) set(ctx context.Context, key, value string) {
	s.t.Helper()
	require.NoError(s.t, s.stack.SetConfigWithOptions(ctx, key, auto.ConfigValue{Value: value}, &auto.ConfigOptions{Path: true}))
}

// upReady runs `up` while the test plays the Job controller and the Dynamo operator.
func upReady(t *testing.T, s *testStack, c controllers) []operation {
	t.Helper()
	c.jobOutcome, c.graphReady = "complete", true
	stop := playControllers(t, cluster.client, s.ns, c)
	defer stop()
	return upOK(t, s)
}

// upWithJobs runs `up` on the plain API server while the test plays the Job controller (every
// Job completes) and the garbage collector.
func upWithJobs(t *testing.T, s *testStack) []operation {
	t.Helper()
	stop := playControllers(t, cluster.client, s.ns, controllers{jobOutcome: "complete"})
	defer stop()
	return upOK(t, s)
}

// upOK runs `up` and requires it to succeed.
func upOK(t *testing.T, s *testStack) []operation {
	t.Helper()
	_, ops, err := s.up(context.Background())
	require.NoError(t, err, s.log.String())
	return ops
}

// policyUp runs `go run ./cmd/policy -stack <s> -up` (built once) on a stack's project: `pulumi
// up` with the policies in front of it. It returns the output and the exit code.
func policyUp(t *testing.T, s *testStack, args ...string) (string, int) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(s.dir, "main.go")); err != nil {
		copyProgramInto(t, s.dir)
	}
	cmd := exec.Command(command(t, "./cmd/policy", "policy"), append([]string{"-stack", s.name, "-project", s.dir, "-up"}, args...)...)
	cmd.Env = os.Environ()
	for k, v := range s.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	code := 0
	if exit, ok := err.(*exec.ExitError); ok {
		code = exit.ExitCode()
	} else {
		require.NoError(t, err, string(out))
	}
	return string(out), code
}

// copyProgramInto copies the Go module the CLI builds into dir (a stack's project copy holds only
// Pulumi.yaml and the stack files, for the Automation API's inline program), and the program as
// the suite built it once into the copy's build target (builtProgramInto).
func copyProgramInto(t *testing.T, dir string) {
	t.Helper()
	copySourceInto(t, dir)
	builtProgramInto(t, dir)
}

// copySourceInto copies the program's Go module into dir: go.mod, go.sum, main.go and the folder of
// every package of the module main.go imports (go list -deps), so that the language host builds it
// there on the first run, as from a fresh clone.
func copySourceInto(t *testing.T, dir string) {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-f", `{{if .Module}}{{if .Module.Main}}{{.ImportPath}}{{end}}{{end}}`, ".")
	cmd.Dir = cluster.root
	deps, err := cmd.Output()
	require.NoError(t, err)
	paths := []string{"go.mod", "go.sum", "main.go"}
	for _, pkg := range strings.Fields(string(deps)) {
		rel, ok := strings.CutPrefix(pkg, "minimax-m3/")
		if top, _, _ := strings.Cut(rel, "/"); ok && !slices.Contains(paths, top) {
			paths = append(paths, top)
		}
	}
	for _, p := range paths {
		out, err := exec.Command("cp", "-r", filepath.Join(cluster.root, p), dir).CombinedOutput()
		require.NoError(t, err, string(out))
	}
}

// builtProgramInto copies the program, built once for the suite, into dir's build target (where
// the toolchain's language host builds it, .toolchain/program/minimax-m3). The host still runs `go
// build` there, which finds the binary up to date (the same sources, built with the same flags,
// -trimpath, so the same build ID) instead of linking the 80 MB binary again for each copy; a
// copy whose sources differ is built anew.
func builtProgramInto(t *testing.T, dir string) {
	t.Helper()
	program := builtProgram(t)
	target := filepath.Join(dir, ".toolchain", "program")
	require.NoError(t, os.MkdirAll(target, 0o755))
	out, err := exec.Command("cp", program, filepath.Join(target, "minimax-m3")).CombinedOutput()
	require.NoError(t, err, string(out))
}

func recipeDir(t *testing.T) string {
	dir := os.Getenv("MINIMAX_M3_RECIPE")
	require.NotEmpty(t, dir, "MINIMAX_M3_RECIPE names the upstream recipe's folder (make sets it)")
	return dir
}

// controllers says which controllers a test on the plain API server plays.
type controllers struct {
	// jobOutcome: "complete" marks download Jobs complete, "fail" marks them failed with
	// BackoffLimitExceeded; "" leaves them running.
	jobOutcome string
	// graphReady marks each graph Ready at its generation the way an operator that writes the
	// generation only in status.observedGeneration does: not the Dynamo operator this project
	// runs, which writes it in the Ready condition too (daytwo_test.go says why it is played).
	graphReady bool
}

// playControllers plays the missing controllers in a namespace until stop is called. It always
// plays the garbage collector, which releases foreground deletions.
func playControllers(t *testing.T, on client.Client, ns string, c controllers) (stop func()) {
	return playEvery(func(ctx context.Context) {
		if c.jobOutcome != "" {
			playJobController(ctx, t, on, ns, c.jobOutcome)
		}
		if c.graphReady {
			playReadyWithStatusGeneration(ctx, t, on, ns)
		}
		playGarbageCollector(ctx, t, on, ns)
	})
}

// playEvery runs play every 200 ms until stop is called.
func playEvery(play func(context.Context)) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			play(ctx)
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// playJobController marks every unfinished Job complete or failed, with the status fields the API
// server requires for each.
func playJobController(ctx context.Context, t *testing.T, on client.Client, ns, outcome string) {
	var jobs batchv1.JobList
	if err := on.List(ctx, &jobs, client.InNamespace(ns)); err != nil {
		return
	}
	for i := range jobs.Items {
		job := &jobs.Items[i]
		if len(job.Status.Conditions) > 0 || job.DeletionTimestamp != nil {
			continue
		}
		if err := finishJob(ctx, on, job, outcome != "complete"); err != nil && ctx.Err() == nil {
			t.Logf("playing the Job controller: %v", err)
		}
	}
}

// finishJob marks a Job complete, or failed with BackoffLimitExceeded, with the status fields the
// API server requires for each, as the Job controller does.
func finishJob(ctx context.Context, on client.Client, job *batchv1.Job, failed bool) error {
	now := metav1.Now()
	job.Status.StartTime = &now
	cond := func(typ batchv1.JobConditionType, reason string) batchv1.JobCondition {
		return batchv1.JobCondition{Type: typ, Status: corev1.ConditionTrue, Reason: reason, Message: "set by the test playing the Job controller", LastProbeTime: now, LastTransitionTime: now}
	}
	if failed {
		job.Status.Failed = 1
		job.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobFailureTarget, batchv1.JobReasonBackoffLimitExceeded), cond(batchv1.JobFailed, batchv1.JobReasonBackoffLimitExceeded)}
	} else {
		job.Status.CompletionTime = &now
		job.Status.Succeeded = 1
		job.Status.Conditions = []batchv1.JobCondition{cond(batchv1.JobSuccessCriteriaMet, "CompletionsReached"), cond(batchv1.JobComplete, "CompletionsReached")}
	}
	return on.Status().Update(ctx, job)
}

// playReadyWithStatusGeneration marks each graph Ready for its current generation, writing the
// generation only in status.observedGeneration (not in the condition).
func playReadyWithStatusGeneration(ctx context.Context, t *testing.T, on client.Client, ns string) {
	var graphs unstructured.UnstructuredList
	graphs.SetGroupVersionKind(graphGVK.GroupVersion().WithKind("DynamoGraphDeploymentList"))
	if err := on.List(ctx, &graphs, client.InNamespace(ns)); err != nil {
		return
	}
	for i := range graphs.Items {
		g := &graphs.Items[i]
		if g.GetDeletionTimestamp() != nil {
			continue
		}
		observed, _, _ := unstructured.NestedInt64(g.Object, "status", "observedGeneration")
		if c, ok := kcluster.ReadyCondition(g); ok && c.Status == "True" && c.ObservedGeneration == 0 && observed >= g.GetGeneration() {
			continue
		}
		patch := fmt.Sprintf(`{"status":{"state":"successful","observedGeneration":%d,"conditions":[{"type":"Ready","status":"True","reason":"AllComponentsReady","message":"set by the test playing an operator","lastTransitionTime":%q}]}}`,
			g.GetGeneration(), time.Now().UTC().Format(time.RFC3339))
		if err := on.Status().Patch(ctx, g, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil && ctx.Err() == nil {
			t.Logf("playing an operator: %v (%s)", err, patch)
		}
	}
}

// playGarbageCollector releases objects the provider deleted with foreground propagation: with no
// garbage collector running, their foregroundDeletion finalizer would hold them forever.
func playGarbageCollector(ctx context.Context, t *testing.T, on client.Client, ns string) {
	kinds := []schema.GroupVersionKind{
		{Group: "batch", Version: "v1", Kind: "JobList"},
		{Version: "v1", Kind: "ConfigMapList"},
		{Version: "v1", Kind: "SecretList"},
		{Version: "v1", Kind: "PersistentVolumeClaimList"},
		{Group: "policy", Version: "v1", Kind: "PodDisruptionBudgetList"},
		{Group: "networking.k8s.io", Version: "v1", Kind: "NetworkPolicyList"},
		graphGVK.GroupVersion().WithKind("DynamoGraphDeploymentList"),
		computeDomainGVK.GroupVersion().WithKind("ComputeDomainList"),
	}
	for _, k := range kinds {
		var list unstructured.UnstructuredList
		list.SetGroupVersionKind(k)
		if err := on.List(ctx, &list, client.InNamespace(ns)); err != nil {
			continue
		}
		for i := range list.Items {
			o := &list.Items[i]
			if o.GetDeletionTimestamp() == nil || len(o.GetFinalizers()) == 0 {
				continue
			}
			if err := on.Patch(ctx, o, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil && !apierrors.IsNotFound(err) && ctx.Err() == nil {
				t.Logf("playing the garbage collector: %v", err)
			}
		}
	}
}

// get reads a live object; false when it does not exist.
func get(t *testing.T, gvk schema.GroupVersionKind, ns, name string) (*unstructured.Unstructured, bool) {
	t.Helper()
	return getOn(t, cluster.client, gvk, ns, name)
}

// getOn is get on another cluster (the rack box). Only NotFound means it does not exist (nil and
// false); any other error fails the test.
func getOn(t *testing.T, c client.Client, gvk schema.GroupVersionKind, ns, name string) (*unstructured.Unstructured, bool) {
	t.Helper()
	o, live, err := tryGetOn(context.Background(), c, gvk, ns, name)
	require.NoError(t, err)
	return o, live
}

// tryGetOn is getOn for a poll condition: it returns the error instead of failing the test. The
// object is nil, with no error, only when it does not exist (NotFound); it is not live while it is
// being deleted.
func tryGetOn(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, ns, name string) (o *unstructured.Unstructured, live bool, err error) {
	o = &unstructured.Unstructured{}
	o.SetGroupVersionKind(gvk)
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, o); err != nil {
		return nil, false, client.IgnoreNotFound(err)
	}
	return o, o.GetDeletionTimestamp() == nil, nil
}

// mustGet is get of an object that must exist (being deleted or not): the test fails when it does
// not.
func mustGet(t *testing.T, gvk schema.GroupVersionKind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	return mustGetOn(t, cluster.client, gvk, ns, name)
}

// mustGetOn is mustGet on another cluster (the rack box).
func mustGetOn(t *testing.T, c client.Client, gvk schema.GroupVersionKind, ns, name string) *unstructured.Unstructured {
	t.Helper()
	o, _ := getOn(t, c, gvk, ns, name)
	require.NotNil(t, o, "%s %s/%s exists", gvk.Kind, ns, name)
	return o
}

func liveGraphSpec(t *testing.T, ns, name string) manifest.DynamoGraphDeploymentSpec {
	t.Helper()
	return liveGraphSpecOn(t, cluster.client, ns, name)
}

// liveGraphSpecOn is liveGraphSpec on another cluster (the rack box).
func liveGraphSpecOn(t *testing.T, c client.Client, ns, name string) manifest.DynamoGraphDeploymentSpec {
	t.Helper()
	g, ok := getOn(t, c, graphGVK, ns, name)
	require.True(t, ok, "graph %s/%s exists", ns, name)
	b, err := json.Marshal(g.Object["spec"])
	require.NoError(t, err)
	var spec manifest.DynamoGraphDeploymentSpec
	require.NoError(t, json.Unmarshal(b, &spec))
	return spec
}

func opsOf(ops []operation) map[string]string {
	out := map[string]string{}
	for _, o := range ops {
		out[o.Type+" "+o.Name] += o.Op + " "
	}
	for k, v := range out {
		out[k] = strings.TrimSpace(v)
	}
	return out
}

func toJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// graphOps is opsOf without the smoke test's Job, which a new graph generation replaces (a new
// test for the new generation) whenever the smoke test is on.
func graphOps(t *testing.T, ops []operation) map[string]string {
	t.Helper()
	m := opsOf(ops)
	const smoke = "kubernetes:batch/v1:Job smoke-test"
	if op, ok := m[smoke]; ok {
		assert.Contains(t, op, "replace", "the smoke test runs again for the new generation")
		delete(m, smoke)
	}
	return m
}

// syncBuffer collects the engine's output from several goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// restConfigOf is the client configuration of a kubeconfig's current context.
func restConfigOf(t *testing.T, kubeconfig string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	require.NoError(t, err)
	return cfg
}

// kubeClients are typed and dynamic clients of a local API server, as cmd/bench makes them.
func kubeClients(t *testing.T, kubeconfig string) (kubernetes.Interface, dynamic.Interface) {
	t.Helper()
	cfg := restConfigOf(t, kubeconfig)
	kube, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	return kube, dyn
}

// The portal's helpers: managers, requests and its HTTP API's client.

// newPortal is a portal manager on the project, with a state directory (workspaces and a file
// backend) of the test's own.
func newPortal(t *testing.T) *portal.Manager {
	t.Helper()
	return newPortalAt(t, t.TempDir())
}

func newPortalAt(t *testing.T, stateDir string) *portal.Manager {
	t.Helper()
	return newPortalWithPassphrase(t, stateDir, "portal-tests")
}

func newPortalWithPassphrase(t *testing.T, stateDir, passphrase string) *portal.Manager {
	t.Helper()
	return newPortalOn(t, cluster.kubeconfig, stateDir, passphrase)
}

// newPortalOn is a portal manager deploying to the cluster of kubeconfig (the rack box).
func newPortalOn(t *testing.T, kubeconfig, stateDir, passphrase string) *portal.Manager {
	t.Helper()
	return newPortalWith(t, kubeconfig, stateDir, passphrase, func(*portal.Options) {})
}

// newPortalWith is newPortalOn with options changed by set.
func newPortalWith(t *testing.T, kubeconfig, stateDir, passphrase string, set func(*portal.Options)) *portal.Manager {
	t.Helper()
	o := portal.Options{
		ProjectDir:      cluster.root,
		StateDir:        stateDir,
		ImageRegistries: append(slices.Clone(config.DefaultImageRegistries), rackbox.Registry),
		EnvVars: map[string]string{
			"PULUMI_CONFIG_PASSPHRASE": passphrase,
			"PULUMI_HOME":              filepath.Join(cluster.root, ".toolchain", "pulumi-home"),
			"KUBECONFIG":               kubeconfig,
			"PATH":                     os.Getenv("PATH"),
		},
	}
	set(&o)
	m, err := portal.New(o)
	require.NoError(t, err)
	return m
}

// portalToken is the portal tests' Hugging Face token: their own, so that scanning the host's
// command lines for it finds only what these tests' processes leak.
const portalToken = "hf_portalTokenNeverInArgv"

// portalRequest is a site's request: its namespace, the token, test-sized timeouts, no smoke test.
// The portal's tests run on the plain API server, where no Job controller or Dynamo operator runs:
// the stack waits neither for the download nor for the graph (what a site without either does,
// docs/configuration.md), so nothing of them is played; the rack box's tests wait for both for real
// (TestBoxPortalPageShowsAnUpLive through the portal).
func portalRequest(base, stack, ns string) portal.Request {
	r := portal.NewRequest(base, stack)
	r.Config.Namespace.Name = ns
	r.HFToken = portalToken
	r.Config.ModelDownload.Timeout = "3m"
	r.Config.ModelDownload.WaitForCompletion = false
	r.Config.Readiness.Timeout = "3m"
	r.Config.Readiness.WaitForReady = false
	r.Config.SmokeTest.Enabled = false
	return r
}

// noWaits is portalRequest's site config as a request body's: no waits on the plain API server.
func noWaits(ns string) map[string]any {
	return map[string]any{
		"namespace":     map[string]any{"name": ns},
		"modelDownload": map[string]any{"timeout": "3m", "waitForCompletion": false},
		"readiness":     map[string]any{"timeout": "3m", "waitForReady": false},
		"smokeTest":     map[string]any{"enabled": false},
	}
}

// destroyAfter removes the stack's resources when the test ends (playing the garbage collector the
// plain API server does not run).
func destroyAfter(t *testing.T, m *portal.Manager, stack, ns string) {
	t.Cleanup(func() {
		stop := playControllers(t, cluster.client, ns, controllers{})
		defer stop()
		_ = m.Destroy(context.Background(), stack, true, portal.RunOptions{Wait: true})
	})
}

// portalCommand is cmd/portal, built.
func portalCommand(t *testing.T) string {
	t.Helper()
	return command(t, "./cmd/portal", "portal")
}

const portalBearer = "portal-http-test-bearer-token"

// httpClient calls the portal with the bearer token (portalBearer unless token is set) and keeps
// every response body it saw.
type httpClient struct {
	t      *testing.T
	base   string
	token  string
	bodies []string
}

func (c *httpClient) bearer() string {
	if c.token != "" {
		return c.token
	}
	return portalBearer
}

// do sends a request with body as JSON (none when nil) and returns the response's status and body;
// a request that fails fails the test.
func (c *httpClient) do(method, path string, body any) (int, []byte) {
	c.t.Helper()
	code, b, err := c.tryDo(context.Background(), method, path, body)
	require.NoError(c.t, err)
	return code, b
}

// tryDo is do for a poll condition: it returns the error instead of failing the test.
func (c *httpClient) tryDo(ctx context.Context, method, path string, body any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, r)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.bearer())
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, err
	}
	c.bodies = append(c.bodies, string(b))
	return resp.StatusCode, b, nil
}

// sse reads a stack's event stream to its end: the progress events and the done event's error.
func (c *httpClient) sse(stack string) ([]portal.Event, string) {
	c.t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.base+"/api/stacks/"+stack+"/events", nil)
	require.NoError(c.t, err)
	req.Header.Set("Authorization", "Bearer "+c.bearer())
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer func() { _ = resp.Body.Close() }()
	require.Equal(c.t, http.StatusOK, resp.StatusCode)
	require.Equal(c.t, "text/event-stream", resp.Header.Get("Content-Type"))
	var events []portal.Event
	var event string
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		c.bodies = append(c.bodies, line)
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			data := strings.TrimPrefix(line, "data: ")
			if event == "done" {
				var d struct{ Error string }
				require.NoError(c.t, json.Unmarshal([]byte(data), &d))
				return events, d.Error
			}
			var e portal.Event
			require.NoError(c.t, json.Unmarshal([]byte(data), &e))
			events = append(events, e)
		}
	}
	c.t.Fatalf("event stream of %s ended without done: %v", stack, sc.Err())
	return nil, ""
}
