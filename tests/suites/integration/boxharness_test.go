package integration

import (
	"context"
	"crypto/sha256"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/stretchr/testify/require"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"minimax-m3/benchmark"
	"minimax-m3/config"
	kcluster "minimax-m3/internal/cluster"
	"minimax-m3/portal"
	"minimax-m3/portal/httpapi"
	"minimax-m3/tests/framework/aiperfexport"
	"minimax-m3/tests/framework/dynamooperator"
	"minimax-m3/tests/framework/poll"
	"minimax-m3/tests/framework/rackbox"
)

// The suite's helpers for the rack box; those of the plain API server, the stacks and the portal
// are in harness_test.go. What the box runs for real and what it plays: docs/development.md.

// The rack box (package rackbox) is a second local cluster whose control plane runs for real:
// kube-apiserver, kube-controller-manager, kube-scheduler, kwok simulating GB200 NVL72 racks, and
// the real Dynamo operator. The first test that needs it starts it; TestMain stops it. Each test
// adds its own rack and pins its stack's workers to it, so tests that run at once do not take each
// other's GPUs.
var box struct {
	once sync.Once
	err  error
	*rackbox.Box
	operator *dynamooperator.Operator
	log      *syncBuffer
}

// rackBox is the running box; the test fails when it cannot start.
func rackBox(t *testing.T) *rackbox.Box {
	t.Helper()
	if !slotOnBox(t) {
		t.Fatal("a test on the shared rack box starts with parallelOnBox(t), not parallel(t): the test that stops the box's operator must not run beside it")
	}
	box.once.Do(func() {
		box.log = &syncBuffer{}
		box.Box, box.err = rackbox.Start(context.Background(), rackbox.Options{Bin: cluster.bin, CRDs: os.Getenv("MINIMAX_M3_CRDS")})
		if box.err != nil {
			return
		}
		// Like every server of the suite (startAPIServer); its controllers and kwok die with the
		// suite's process on their own (Pdeathsig).
		box.StopOnSignal()
		box.StopBefore(testTimeout)
		if box.err = installPrometheusOperatorCRDs(box.Config); box.err != nil {
			return
		}
		if box.err = installGatewayAPICRDs(box.Config); box.err != nil {
			return
		}
		if box.err = installInferencePoolCRD(box.Config); box.err != nil {
			return
		}
		if box.operator, box.err = startBoxOperator(); box.err != nil {
			return
		}
		// The site, before any stack: every test sees the same one.
		if box.err = startSite(box.Box); box.err != nil {
			return
		}
		box.err = startGateway(box.Box)
	})
	require.NoError(t, box.err, "the rack box cannot start\n%s", boxLogs())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("rack box logs:\n%s", boxLogs())
		}
	})
	return box.Box
}

// prometheusOperatorModule is the prometheus-operator release whose CRDs the box serves, as a
// cluster with kube-prometheus-stack does: read from the release's Go module (the module proxy
// serves this release of the root module; the program's typed API module is pinned in go.mod).
const prometheusOperatorModule = "github.com/prometheus-operator/prometheus-operator@v0.85.0"

// installPrometheusOperatorCRDs installs the PodMonitor and PrometheusRule CRDs a stack with
// observability on creates objects of. No prometheus-operator runs: nothing in the box scrapes.
func installPrometheusOperatorCRDs(cfg *rest.Config) error {
	out, err := exec.Command("go", "mod", "download", "-json", prometheusOperatorModule).Output()
	if err != nil {
		return fmt.Errorf("downloading %s for its CRDs: %w", prometheusOperatorModule, err)
	}
	var mod struct{ Dir, Error string }
	if err := json.Unmarshal(out, &mod); err != nil || mod.Dir == "" {
		return fmt.Errorf("downloading %s for its CRDs: %v %s", prometheusOperatorModule, err, mod.Error)
	}
	dir := filepath.Join(mod.Dir, "example", "prometheus-operator-crd")
	_, err = envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{
		Paths:              []string{filepath.Join(dir, "monitoring.coreos.com_podmonitors.yaml"), filepath.Join(dir, "monitoring.coreos.com_prometheusrules.yaml")},
		ErrorIfPathMissing: true,
		MaxTime:            time.Minute,
	})
	return err
}

// installGatewayAPICRDs installs Gateway API's standard CRDs the program's HTTPRoutes need, from
// the gateway-api module the program builds its routes with (its own release's CRDs). No Gateway
// controller runs: a route is an object the tests read, no traffic flows.
func installGatewayAPICRDs(cfg *rest.Config) error {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api").Output()
	if err != nil {
		return fmt.Errorf("finding the gateway-api module for its CRDs: %w", err)
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "standard")
	var paths []string
	for _, kind := range []string{"gatewayclasses", "gateways", "httproutes", "referencegrants"} {
		paths = append(paths, filepath.Join(dir, "gateway.networking.k8s.io_"+kind+".yaml"))
	}
	_, err = envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true, MaxTime: time.Minute})
	return err
}

// installInferencePoolCRD installs the Gateway API Inference Extension's InferencePool CRD, which
// the operator makes a pool of for a graph's endpoint picker, from the module the program takes the
// picker's configuration type from (the release the operator builds with). No gateway implements
// it here: the pool is an object the tests read.
func installInferencePoolCRD(cfg *rest.Config) error {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/gateway-api-inference-extension").Output()
	if err != nil {
		return fmt.Errorf("finding the gateway-api-inference-extension module for its CRDs: %w", err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), "config", "crd", "bases", "inference.networking.k8s.io_inferencepools.yaml")
	_, err = envtest.InstallCRDs(cfg, envtest.CRDInstallOptions{Paths: []string{path}, ErrorIfPathMissing: true, MaxTime: time.Minute})
	return err
}

// startBoxOperator starts the box's operator, cluster-wide, as it is deployed.
func startBoxOperator() (*dynamooperator.Operator, error) {
	return dynamooperator.Start(context.Background(), dynamooperator.Options{
		Binary:     filepath.Join(cluster.bin, "dynamo-operator"),
		Kubeconfig: box.Kubeconfig,
		Config:     box.Config,
		CRDDir:     filepath.Join(operatorSource(), "config", "crd", "bases"),
		Log:        box.log,
	})
}

// operatorSource is the operator's source folder; its CRD folder holds the CRD the operator
// watches beyond MINIMAX_M3_CRDS (dynamocheckpoints).
func operatorSource() string {
	if dir := os.Getenv("MINIMAX_M3_DYNAMO_OPERATOR"); dir != "" {
		return dir
	}
	return filepath.Join(cluster.root, "..", "shared", "reference", "dynamo-operator")
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

func boxLogs() string {
	s := ""
	if box.Box != nil {
		s = box.Logs()
	}
	if box.log != nil {
		s += "--- dynamo-operator (last output)\n" + tail(box.log.String(), 8<<10)
	}
	return s
}

// stopBox stops the box if a test started it.
func stopBox() {
	if box.operator != nil {
		_ = box.operator.Stop()
	}
	if box.Box != nil {
		if err := box.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stopping the rack box:", err)
		}
	}
}

// addRack adds a rack to the box for the test's lifetime.
func addRack(t *testing.T, r rackbox.Rack) rackbox.Rack {
	t.Helper()
	b := rackBox(t)
	require.NoError(t, b.AddRack(context.Background(), r))
	t.Cleanup(func() { _ = b.RemoveRack(context.Background(), r) })
	return r
}

// workerRoles are a stack's worker roles, as config keys.
func workerRoles(stack string) []string {
	if stack == "disagg" {
		return []string{"prefillWorker", "decodeWorker"}
	}
	return []string{"worker"}
}

// newBoxStack is a stack in the box whose workers run on rack r, placed as a user places them on
// a GB200 pool: a node selector for the pool (here the test's rack; the GPU and arm64 taints are
// tolerated by default), and placement.topologyKey keeping them in one NVLink clique. The smoke test runs (its pod's
// result comes from a kwok stage: no model runs here).
func newBoxStack(t *testing.T, stack, ns string, r rackbox.Rack, extra auto.ConfigMap) *testStack {
	t.Helper()
	return newBoxStackOn(t, rackBox(t).Kubeconfig, stack, ns, r, extra)
}

// newBoxStackOn is newBoxStack with a kubeconfig of the test's own for the box.
func newBoxStackOn(t *testing.T, kubeconfig, stack, ns string, r rackbox.Rack, extra auto.ConfigMap) *testStack {
	t.Helper()
	cfg := auto.ConfigMap{
		"minimax-m3:smokeTest.enabled":     {Value: "true"},
		"minimax-m3:placement.topologyKey": {Value: rackbox.CliqueLabel},
	}
	for _, role := range workerRoles(stack) {
		cfg[fmt.Sprintf("minimax-m3:%s.scheduling.nodeSelector[%q]", role, rackbox.RackLabel)] = auto.ConfigValue{Value: r.Name}
	}
	for k, v := range extra {
		cfg[k] = v
	}
	return makeStack(t, kubeconfig, stack, ns, cfg, nil)
}

// readyBoxStack is newBoxStack on a rack of its own, brought up to Ready.
func readyBoxStack(t *testing.T, stack, ns string, r rackbox.Rack, extra auto.ConfigMap) *testStack {
	t.Helper()
	s := newBoxStack(t, stack, ns, addRack(t, r), extra)
	_, _, err := s.up(context.Background())
	require.NoError(t, err, s.log.String())
	return s
}

const graphLabelKey = "nvidia.com/dynamo-graph-deployment-name"

// boxKubectl runs the real kubectl against the box, as a user would.
func boxKubectl(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	cmd := exec.Command("kubectl", append([]string{"--kubeconfig", box.Kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	return string(out)
}

// boxGraph reads a graph in the box; the test fails when it does not exist.
func boxGraph(t *testing.T, ns, name string) *unstructured.Unstructured {
	t.Helper()
	return mustGetOn(t, box.Client, graphGVK, ns, name)
}

// operatorReady says whether the Dynamo operator reports the graph Ready at its generation in the
// Ready condition itself. It is stricter than kcluster.ReadyAtGeneration, which also takes
// status.observedGeneration when the condition has none (what `up` waits for, and what an older or
// patched operator writes; daytwo_test.go plays it on the plain API server): the operator the box
// runs writes the generation in the condition, and the box's tests hold it to that.
func operatorReady(g *unstructured.Unstructured) bool {
	c, ok := kcluster.ReadyCondition(g)
	return ok && c.Status == "True" && c.ObservedGeneration == g.GetGeneration()
}

// podsOf lists the pods in ns that match labels, those being deleted left out.
func podsOf(t *testing.T, ns string, labels client.MatchingLabels) []corev1.Pod {
	t.Helper()
	pods, err := listPods(context.Background(), ns, labels)
	require.NoError(t, err)
	return pods
}

// listPods is podsOf for a poll condition: it returns the error instead of failing the test.
func listPods(ctx context.Context, ns string, labels client.MatchingLabels) ([]corev1.Pod, error) {
	var pods corev1.PodList
	if err := box.Client.List(ctx, &pods, client.InNamespace(ns), labels); err != nil {
		return nil, err
	}
	return slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil }), nil
}

func podCondition(p *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func jobCondition(j *batchv1.Job, typ batchv1.JobConditionType) bool {
	return slices.ContainsFunc(j.Status.Conditions, func(c batchv1.JobCondition) bool { return c.Type == typ && c.Status == corev1.ConditionTrue })
}

// eventually polls cond on the test goroutine every 250 ms (poll.Until) and fails the test when it
// is not done within timeout, with what was awaited and cond's last error. (rackBox's cleanup
// prints the box's logs when the test fails.)
func eventually(t *testing.T, timeout time.Duration, what string, cond func(ctx context.Context) (bool, error)) {
	t.Helper()
	require.NoError(t, poll.Until(context.Background(), timeout, 250*time.Millisecond, what, cond))
}

// heldDownload waits for the download Job's pod of a stack whose modelDownload.image is
// rackbox.HeldImage to run (the box holds it), and returns a function that ends it with exit code
// 0, so that the Job controller completes the Job. Both run on the test goroutine.
func heldDownload(t *testing.T, ns string) (release func()) {
	t.Helper()
	downloads := client.MatchingLabels{"batch.kubernetes.io/job-name": "minimax-m3-model-download"}
	eventually(t, 2*time.Minute, "the download Job's pod runs (held by the box)", func(ctx context.Context) (bool, error) {
		pods, err := listPods(ctx, ns, downloads)
		return err == nil && len(pods) == 1 && pods[0].Status.Phase == corev1.PodRunning, err
	})
	return func() {
		t.Helper()
		pods := podsOf(t, ns, downloads)
		require.NotEmpty(t, pods, "the held download pod")
		held := pods[0]
		patch := client.MergeFrom(held.DeepCopy())
		held.Annotations = map[string]string{rackbox.ExitCodeAnnotation: "0"}
		require.NoError(t, box.Client.Patch(context.Background(), &held, patch))
	}
}

// boxBench is what the benchmark sweep's box tests play around the box. Everything else is real:
// the scheduler places the helper pod and each AIPerf Job's pod (beside the frontend), the Job
// controller runs the write check and the points, the restarts (the recipe's: deleting the
// graph's pods; or the operator's, through spec.restart) are the controllers' and the Dynamo
// operator's, and each exec goes through the API server's exec subresource to the node's kubelet
// endpoint (rackbox: the box's, with the kubelet's own streaming library).
//   - AIPerf (it needs a served model): when a point's pod runs, the test writes what AIPerf
//     0.12 leaves in ARTIFACT_DIR (package aiperfexport: its summary, records and log, in its own
//     format) into the claim's directory, then sets the pod's exit code (rackbox.ExitCodeAnnotation):
//     only then does kwok end the pod;
//   - the helper's container (no container runtime here): the command the kubelet is asked to run
//     runs on this machine, with the claim's mount a local directory.
type boxBench struct {
	t     *testing.T
	ns    string
	claim string
	kube  kubernetes.Interface

	mu sync.Mutex
	// outcome plays each concurrency's AIPerf run (by default every request succeeds).
	outcome map[int]aiperfexport.Point
	// ran lists the AIPerf runs, "<run> c=<N>"; before, when set, runs before a point's pod ends.
	ran    []string
	before func(run string, concurrency int)
}

// exec is what the container runtime would run in the helper pod (the box's kubelet endpoint
// calls it for every exec into the namespace's pods): the command, on this machine, with the
// claim's mount mapped to the local directory.
func (b *boxBench) exec(ctx context.Context, p *corev1.Pod, container string, command []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if container != "helper" || p.Labels["minimax-m3.io/benchmark-step"] != "helper" {
		return fmt.Errorf("exec in %s[%s]: not the helper", p.Name, container)
	}
	args := make([]string, len(command))
	for i, a := range command {
		args[i] = strings.ReplaceAll(a, config.BenchmarkMountPath, b.claim)
	}
	cmd := exec.CommandContext(ctx, args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, stdout, stderr
	// Once ctx ends (the box stops), the command's streams are not waited for long.
	cmd.WaitDelay = 5 * time.Second
	return cmd.Run()
}

// newBoxBench plays AIPerf and the helper's container in ns until the test ends.
func newBoxBench(t *testing.T, ns string) *boxBench {
	kube, err := kubernetes.NewForConfig(box.Config)
	require.NoError(t, err)
	played := &boxBench{t: t, ns: ns, claim: t.TempDir(), kube: kube, outcome: map[int]aiperfexport.Point{}}
	t.Cleanup(box.HandleExec(ns, played.exec))
	ctx, stop := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		played.playAIPerf(ctx)
	}()
	t.Cleanup(func() {
		stop()
		<-stopped
	})
	return played
}

// playAIPerf plays AIPerf in every running point pod of the namespace until ctx is done.
func (b *boxBench) playAIPerf(ctx context.Context) {
	for ctx.Err() == nil {
		var pods corev1.PodList
		if err := box.Client.List(ctx, &pods, client.InNamespace(b.ns), client.HasLabels{rackbox.HeldLabel}); err == nil {
			for i := range pods.Items {
				p := &pods.Items[i]
				// A point's AIPerf pod: its Job's, with a concurrency (the run's helper pod carries the
				// run's label too).
				if p.Labels["batch.kubernetes.io/job-name"] == "" || p.Status.Phase != corev1.PodRunning ||
					p.Annotations[rackbox.ExitCodeAnnotation] != "" || p.DeletionTimestamp != nil {
					continue
				}
				b.run(ctx, p)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (b *boxBench) run(ctx context.Context, p *corev1.Pod) {
	env := map[string]string{}
	for _, e := range p.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	c, err := strconv.Atoi(env["CONCURRENCY"])
	if err != nil || c < 1 {
		b.t.Errorf("playing AIPerf: pod %s has no concurrency: %q", p.Name, env["CONCURRENCY"])
		return
	}
	run := p.Labels[rackbox.HeldLabel]
	b.mu.Lock()
	point, ok := b.outcome[c]
	before := b.before
	b.ran = append(b.ran, fmt.Sprintf("%s c=%d", run, c))
	b.mu.Unlock()
	if !ok {
		point = aiperfexport.Point{Requests: 3}
	}
	point.Concurrency, point.Goodput = c, true
	dir := strings.ReplaceAll(env["ARTIFACT_DIR"], config.BenchmarkMountPath, b.claim)
	if err := aiperfexport.Write(dir, point); err != nil {
		b.t.Errorf("playing AIPerf: %v", err)
		return
	}
	if before != nil {
		before(run, c)
	}
	patch := client.MergeFrom(p.DeepCopy())
	p.Annotations = map[string]string{rackbox.ExitCodeAnnotation: "0"}
	// An interrupted sweep may have deleted the pod meanwhile.
	if err := box.Client.Patch(ctx, p, patch); err != nil && ctx.Err() == nil && !apierrors.IsNotFound(err) {
		b.t.Errorf("ending the AIPerf pod %s: %v", p.Name, err)
	}
}

// onRun sets what runs when a point's AIPerf pod runs, before it ends (nil: nothing).
func (b *boxBench) onRun(f func(run string, concurrency int)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.before = f
}

func (b *boxBench) runs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.ran)
}

// sweepEvents collects a sweep's progress.
type sweepEvents struct {
	mu  sync.Mutex
	all []benchmark.Event
}

func (e *sweepEvents) add(ev benchmark.Event) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.all = append(e.all, ev)
}

func (e *sweepEvents) list() []benchmark.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.all)
}

func (e *sweepEvents) has(substr string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.ContainsFunc(e.all, func(ev benchmark.Event) bool { return strings.Contains(ev.String(), substr) })
}

// csvRows reads a sweep's results.csv.
func csvRows(t *testing.T, dir string) [][]string {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, "results.csv"))
	require.NoError(t, err)
	defer func() { _ = f.Close() }()
	rows, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	return rows
}

// boxBenchLeftovers requires that no sweep object is left, within a minute: the Lease, the Jobs,
// the helper.
func boxBenchLeftovers(t *testing.T, kube kubernetes.Interface, ns, graph string) {
	t.Helper()
	require.NoError(t, poll.Until(context.Background(), time.Minute, 250*time.Millisecond, "no sweep object is left in "+ns, func(ctx context.Context) (bool, error) {
		jobs, err := kube.BatchV1().Jobs(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=benchmark"})
		if err != nil {
			return false, err
		}
		if len(jobs.Items) > 0 {
			return false, fmt.Errorf("%d benchmark Jobs left, %s first", len(jobs.Items), jobs.Items[0].Name)
		}
		if _, err := kube.CoreV1().Pods(ns).Get(ctx, graph+"-bench-helper", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, errors.Join(errors.New("the helper pod is not deleted"), err)
		}
		if _, err := kube.CoordinationV1().Leases(ns).Get(ctx, benchmark.LeaseName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			return false, errors.Join(errors.New("the Lease is not released"), err)
		}
		return true, nil
	}))
}

func sha256Hex(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// boxPortal serves a portal on the rack box over HTTP until the test ends, and destroys stack
// then: a failed test may leave its up running (its download held), so it is cancelled first and
// the wait bounded, and a failure ends the test instead of holding the suite until its timeout.
func boxPortal(t *testing.T, stack string) (*httptest.Server, *httpClient) {
	t.Helper()
	m := newPortalOn(t, box.Kubeconfig, t.TempDir(), "portal-tests")
	srv, err := httpapi.NewServer(context.Background(), m, portalBearer)
	require.NoError(t, err)
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	t.Cleanup(func() {
		_ = m.Cancel(stack)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		_ = m.Destroy(ctx, stack, true, portal.RunOptions{Wait: true})
	})
	return ts, &httpClient{t: t, base: ts.URL}
}
