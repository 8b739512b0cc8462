package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	kcluster "minimax-m3/internal/cluster"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optpreview"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
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
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/automation"
)

// testToken is the Hugging Face token the stacks get; it must never appear in plain text.
const testToken = "hf_integrationTokenNeverPlain"

var (
	graphGVK         = schema.GroupVersionKind{Group: "nvidia.com", Version: "v1beta1", Kind: "DynamoGraphDeployment"}
	computeDomainGVK = schema.GroupVersionKind{Group: "resource.nvidia.com", Version: "v1beta1", Kind: "ComputeDomain"}
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

// getOn is get on another cluster (the rack box).
func getOn(t *testing.T, c client.Client, gvk schema.GroupVersionKind, ns, name string) (*unstructured.Unstructured, bool) {
	t.Helper()
	o := &unstructured.Unstructured{}
	o.SetGroupVersionKind(gvk)
	err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, o)
	if apierrors.IsNotFound(err) {
		return nil, false
	}
	require.NoError(t, err)
	return o, o.GetDeletionTimestamp() == nil
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

// kubeClients are typed and dynamic clients of a local API server, as cmd/bench makes them.
func kubeClients(t *testing.T, kubeconfig string) (kubernetes.Interface, dynamic.Interface) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	require.NoError(t, err)
	kube, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	dyn, err := dynamic.NewForConfig(cfg)
	require.NoError(t, err)
	return kube, dyn
}
