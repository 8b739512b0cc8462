package components

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"minimax-m3/config"
	"minimax-m3/manifest"
)

const smokeTestType = "minimax-m3:index:SmokeTest"

// SmokeTestScript is what the smoke test Job runs: the recipe's two requests to the frontend, made
// patient. A worker's Ready does not mean the model is routable yet (the Dynamo operator's
// component_worker.go: workers register through the KV store, not the Service), so it first polls
// GET /v1/models until the served model is listed, then sends the chat request, retrying 404, 503
// and connection errors; all within SMOKE_TEST_BUDGET_SECONDS, kept below the Job's
// activeDeadlineSeconds so that a failure still writes its result. It succeeds only on HTTP 200
// and a non-empty completion, and leaves its result as JSON in the container's termination
// message, where `up` (a failed pod's message) and the stack output (a passed one's) read it; a
// failure carries the last status and body. A reasoning model may spend a short budget on
// reasoning: its reasoning_content counts as the completion then.
const SmokeTestScript = `import json, os, sys, time, urllib.error, urllib.request

base = os.environ["SMOKE_TEST_URL"]
model = os.environ["SMOKE_TEST_MODEL"]
deadline = time.monotonic() + float(os.environ.get("SMOKE_TEST_BUDGET_SECONDS", "540"))
pause = float(os.environ.get("SMOKE_TEST_RETRY_SECONDS", "5"))
RETRY = (0, 404, 503)  # not routable yet: no connection, no model, no worker


def call(method, path, body=None):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(base + path, data=data, method=method, headers={"Content-Type": "application/json"})
    timeout = max(1.0, min(300.0, deadline - time.monotonic()))
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")
    except Exception as e:  # connection refused, DNS, timeout
        return 0, repr(e)


def finish(passed, **result):
    result["passed"] = passed
    with open(os.environ.get("SMOKE_TEST_RESULT", "/dev/termination-log"), "w") as f:
        json.dump(result, f)  # Kubernetes keeps 4096 bytes of it
    print(json.dumps(result), flush=True)
    sys.exit(0 if passed else 1)


def listed(body):
    try:
        return any(m.get("id") == model for m in json.loads(body).get("data", []))
    except Exception:
        return False


attempts = 0
while True:
    attempts += 1
    status, body = call("GET", "/v1/models")
    if status == 200 and listed(body):
        break
    if status not in RETRY + (200,) or time.monotonic() + pause > deadline:
        finish(False, request="GET /v1/models", status=status, attempts=attempts, body=body[:1500],
               error="the served model %s was not listed" % model)
    time.sleep(pause)

attempts = 0
while True:
    attempts += 1
    start = time.monotonic()
    status, body = call("POST", "/v1/chat/completions", {
        "model": model,
        "messages": [{"role": "user", "content": os.environ["SMOKE_TEST_MESSAGE"]}],
        "max_tokens": int(os.environ["SMOKE_TEST_MAX_TOKENS"]),
    })
    latency = round((time.monotonic() - start) * 1000)
    if status == 200:
        break
    if status not in RETRY or time.monotonic() + pause > deadline:
        finish(False, request="POST /v1/chat/completions", status=status, attempts=attempts, latencyMs=latency, body=body[:1500])
    time.sleep(pause)
try:
    message = json.loads(body)["choices"][0]["message"]
    reply = message.get("content") or message.get("reasoning_content") or ""
except Exception:
    reply = ""
if not reply.strip():
    finish(False, request="POST /v1/chat/completions", status=status, latencyMs=latency, body=body[:1500], error="no completion in the response")
finish(True, status=status, attempts=attempts, latencyMs=latency, reply=reply[:200])
`

// smokeTestBudget is how long the script tries: the Job's deadline less a margin for writing its
// result before Kubernetes ends the pod.
func smokeTestBudget(timeout time.Duration) time.Duration {
	margin := min(30*time.Second, timeout/10)
	return timeout - margin
}

// SmokeTestJobName is the smoke test Job's name: graphName, and a hash of the graph's spec, so a new
// graph generation (any spec change) makes a new Job, which runs the test again, and nothing else
// does.
func SmokeTestJobName(c *config.Config, d manifest.Decisions) (string, error) {
	gs, err := manifest.GraphSpec(c, d)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(gs)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return c.GraphName + "-smoke-" + hex.EncodeToString(sum[:])[:8], nil
}

// SmokeTestJobSpec is the smoke test Job's spec: one try, bounded by smokeTest.timeout, placed like
// the frontend (its scheduling and the pull secrets), calling the frontend Service in the namespace.
func SmokeTestJobSpec(c *config.Config) batchv1.JobSpec {
	timeout, _ := time.ParseDuration(c.SmokeTest.Timeout) // validated
	deadline := int64(timeout.Seconds())
	zero, one := int32(0), int32(1)
	noEscalation, nonRoot := false, true
	user := int64(1000)

	pod := manifest.SitePodSpec(c.ImagePullSecrets, c.Frontend.Scheduling)
	pod.RestartPolicy = corev1.RestartPolicyNever
	pod.Containers = []corev1.Container{{
		Name:            manifest.MainContainer,
		Image:           c.SmokeTestImage(),
		ImagePullPolicy: corev1.PullIfNotPresent,
		Command:         []string{"python3", "-c", SmokeTestScript},
		Env: []corev1.EnvVar{
			{Name: "SMOKE_TEST_URL", Value: fmt.Sprintf("http://%s:%d", c.FrontendServiceName(), config.FrontendPort)},
			{Name: "SMOKE_TEST_MODEL", Value: c.ServedModelName()},
			{Name: "SMOKE_TEST_MESSAGE", Value: c.SmokeTest.Message},
			{Name: "SMOKE_TEST_MAX_TOKENS", Value: fmt.Sprint(c.SmokeTest.MaxTokens)},
			{Name: "SMOKE_TEST_BUDGET_SECONDS", Value: fmt.Sprint(int64(smokeTestBudget(timeout).Seconds()))},
		},
		TerminationMessagePolicy: corev1.TerminationMessageReadFile,
		SecurityContext: &corev1.SecurityContext{
			AllowPrivilegeEscalation: &noEscalation,
			RunAsNonRoot:             &nonRoot,
			RunAsUser:                &user,
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("256Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("1Gi")},
		},
	}}
	return batchv1.JobSpec{
		// One try: a failed smoke test is an answer, not a flake to hide.
		BackoffLimit:          &zero,
		Completions:           &one,
		Parallelism:           &one,
		ActiveDeadlineSeconds: &deadline,
		Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app.kubernetes.io/component": "smoke-test", ClientLabel: c.GraphName}},
			Spec:       pod,
		},
	}
}

// SmokeTestArgs configure the smoke test.
type SmokeTestArgs struct {
	// Meta carries the stack's identity and what it adopted into every object's annotations.
	Meta      StackMeta
	Namespace pulumi.StringInput
	Config    *config.Config
	// Decided is what the pre-deploy checks decided about the graph's objects, whose spec names
	// the Job.
	Decided manifest.Decisions
	// GraphReady is the graph's Ready (Graph.Ready): the test starts once it resolves.
	GraphReady pulumi.ResourceArrayInput
	// Results reads the finished pod's result; nil leaves the result out of the stack output.
	Results JobResultReader
	// Index is the graph's number from 0 (scaleOut.graphs): it names the component's children.
	Index int
}

// SmokeTest is the smoke test Job and what it found.
type SmokeTest struct {
	pulumi.ResourceState
	JobName pulumi.StringOutput `pulumi:"jobName"`
	// Result is the passed test's JSON result (status, latencyMs, reply), as a map.
	Result pulumi.MapOutput `pulumi:"result"`
	// Job is the smoke test's Job: what waits for the test to pass depends on it.
	Job pulumi.Resource `pulumi:"-"`
	// Passed resolves to the Job once it has passed (the provider waits for its completion).
	Passed pulumi.ResourceArrayOutput `pulumi:"-"`
}

// NewSmokeTest creates the smoke test Job once the graph is Ready; `up` waits for it, and fails at
// once when it fails, with the pod's result (HTTP status and body) among the provider's messages.
func NewSmokeTest(ctx *pulumi.Context, name string, args *SmokeTestArgs, opts ...pulumi.ResourceOption) (*SmokeTest, error) {
	s := &SmokeTest{}
	if err := ctx.RegisterComponentResource(smokeTestType, name, s, opts...); err != nil {
		return nil, err
	}
	c := args.Config
	jobName, err := SmokeTestJobName(c, args.Decided)
	if err != nil {
		return nil, err
	}
	timeout, _ := time.ParseDuration(c.SmokeTest.Timeout) // validated
	wait := (timeout + 2*time.Minute).String()
	job, err := newObject(ctx, graphChild(name, "smoke-test", args.Index), objectArgs{
		APIVersion: "batch/v1", Kind: "Job",
		Name: jobName, Namespace: args.Namespace, Labels: stackLabels(ctx),
		Annotations: args.Meta.annotations(ctx, "Job", jobName, nil),
		Spec:        SmokeTestJobSpec(c),
	},
		pulumi.Parent(s),
		pulumi.DependsOnInputs(args.GraphReady),
		// Kubernetes' activeDeadlineSeconds ends a hanging test first (DeadlineExceeded).
		pulumi.Timeouts(&pulumi.CustomTimeouts{Create: wait, Update: wait}),
	)
	if err != nil {
		return nil, err
	}
	s.Job = job
	s.Passed = job.ID().ApplyT(func(pulumi.ID) []pulumi.Resource { return []pulumi.Resource{job} }).(pulumi.ResourceArrayOutput)
	s.JobName = job.ID().ApplyT(func(pulumi.ID) string { return jobName }).(pulumi.StringOutput)
	s.Result = pulumi.All(job.ID(), args.Namespace).ApplyT(func(v []any) (map[string]any, error) {
		result := map[string]any{"job": jobName, "passed": true}
		if args.Results == nil {
			return result, nil
		}
		rctx, cancel := context.WithTimeout(ctx.Context(), 15*time.Second)
		defer cancel()
		msg, err := args.Results.JobResult(rctx, v[1].(string), jobName, manifest.MainContainer)
		if err != nil || msg == "" {
			// The pod is gone (or unreadable): the Job's completion is the result.
			return result, nil
		}
		var found map[string]any
		if json.Unmarshal([]byte(msg), &found) == nil {
			for k, v := range found {
				result[k] = v
			}
		}
		return result, nil
	}).(pulumi.MapOutput)
	return s, ctx.RegisterResourceOutputs(s, pulumi.Map{"jobName": s.JobName, "result": s.Result})
}
