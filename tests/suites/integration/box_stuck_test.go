package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/events"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optup"
	"github.com/pulumi/pulumi/sdk/v3/go/common/apitype"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/tests/framework/rackbox"
)

// Every stuck rollout ends with its cause, with readiness.timeout at its default (2 h): what is
// terminal at once, what waits for the progress deadline, and the deadline's error naming what
// persisted. The box plays what a kubelet writes (the registry's answers, a probe that never
// passes: rackbox's troubles) and the IMEX daemon (rackbox's players; the compute-domain-controller
// is real). Each up is bounded by the test's context, well under readiness.timeout: an up that
// waited for the timeout fails the test.

// stuckUp runs up on stack s and returns its error; the test fails if up has not ended within
// bound (it would have run into readiness.timeout).
func stuckUp(t *testing.T, s *testStack, bound time.Duration) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	ch := make(chan events.EngineEvent)
	shown := make(chan []string, 1)
	go func() { shown <- errorDiagnostics(ch) }()
	_, err := s.stack.Up(ctx, optup.EventStreams(ch), optup.ProgressStreams(s.log), optup.ErrorProgressStreams(s.log))
	if ctx.Err() != nil {
		// What the graph's pods looked like, for the failure's account.
		for _, p := range podsOf(t, s.ns, client.MatchingLabels{graphLabelKey: aggGraph}) {
			t.Logf("pod %s: phase %s, conditions %v, containers %v", p.Name, p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses)
		}
	}
	require.NoError(t, ctx.Err(), "up did not end on its own within %s\n%s", bound, s.log.String())
	require.Error(t, err, s.log.String())
	var errs []string
	select {
	case errs = <-shown:
	case <-time.After(30 * time.Second):
		t.Fatal("the Automation API did not close the event stream of a finished up")
	}
	assertShownOnce(t, errs, err.Error())
	return err
}

// errorDiagnostics collects the error diagnostics of an operation's event stream until it closes.
func errorDiagnostics(ch <-chan events.EngineEvent) []string {
	var errs []string
	for e := range ch {
		if d := e.DiagnosticEvent; d != nil && d.Severity == "error" {
			errs = append(errs, strings.TrimSpace(d.Message))
		}
	}
	return errs
}

// assertShownOnce asserts one error line per failure: the one error diagnostic the graph's wait
// showed on the graph, and not the engine's second copy of it ("an unhandled error occurred:
// waiting for RPCs: ..."), in the events (errs) or the output.
func assertShownOnce(t *testing.T, errs []string, output string) {
	t.Helper()
	if assert.Len(t, errs, 1, "one error diagnostic: %q", errs) {
		assert.Contains(t, errs[0], "DynamoGraphDeployment ", "the graph's wait's error")
	}
	assert.NotContains(t, output, "an unhandled error occurred")
	assert.NotContains(t, output, "waiting for RPCs")
}

// The way users run it: `pulumi up` through the plain CLI (main.go built by the Go language host)
// shows a stuck rollout's cause once, as the inline programs above do.
func TestBoxPlainCLIUpShowsAMissingTagOnce(t *testing.T) {
	parallelOnBox(t)
	const ns = "box-stuck-cli"
	s := stuckStack(t, ns, addRack(t, rackbox.NVL72("stuck-cli").WithGPUs(12)), "", rackbox.TroubleImageNotFound)
	copySourceInto(t, s.dir)
	eventLog := filepath.Join(t.TempDir(), "up.events")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "pulumi", "up", "--stack", s.name, "--cwd", s.dir, "--yes", "--skip-preview", "--non-interactive", "--event-log", eventLog)
	cmd.Env = os.Environ()
	for k, v := range s.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Env = append(cmd.Env, "PULUMI_DEBUG_COMMANDS=true") // --event-log is a debug command's flag
	out, err := cmd.CombinedOutput()
	require.NoError(t, ctx.Err(), "up did not end on its own\n%s", out)
	require.Error(t, err, string(out))
	assert.Regexp(t, `DynamoGraphDeployment `+ns+`/`+aggGraph+` cannot become Ready without a change: pod \S+ \(component Frontend\) on node \S+, container main: ErrImagePull: `, string(out))
	data, err := os.ReadFile(eventLog)
	require.NoError(t, err)
	var errs []string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var e apitype.EngineEvent
		require.NoError(t, json.Unmarshal([]byte(line), &e), line)
		if d := e.DiagnosticEvent; d != nil && d.Severity == "error" {
			errs = append(errs, strings.TrimSpace(d.Message))
		}
	}
	assertShownOnce(t, errs, string(out))
}

// stuckStack is an agg stack on a rack of its own, readiness.timeout at its default, with the
// progress deadline short for the test (deadline "": the default) and a trouble on the frontend
// ("": none).
func stuckStack(t *testing.T, ns string, r rackbox.Rack, deadline, frontendTrouble string) *testStack {
	t.Helper()
	cfg := auto.ConfigMap{"minimax-m3:readiness.timeout": {Value: "2h"}}
	if deadline != "" {
		cfg["minimax-m3:readiness.progressDeadline"] = auto.ConfigValue{Value: deadline}
	}
	if frontendTrouble != "" {
		cfg[troubleKey("frontend")] = auto.ConfigValue{Value: frontendTrouble}
	}
	return newBoxStack(t, "agg", ns, r, cfg)
}

// A tag the registry does not have ends up at once: the kubelet's message is the registry's answer.
func TestBoxAMissingTagEndsUpAtOnce(t *testing.T) {
	parallelOnBox(t)
	const ns = "box-stuck-tag"
	s := stuckStack(t, ns, addRack(t, rackbox.NVL72("stuck-tag").WithGPUs(12)), "", rackbox.TroubleImageNotFound)
	err := stuckUp(t, s, 6*time.Minute)
	assert.Regexp(t, `DynamoGraphDeployment `+ns+`/`+aggGraph+` cannot become Ready without a change: pod \S+ \(component Frontend\) on node \S+, container main: ErrImagePull: `+
		`failed to pull and unpack image "[^"]+": failed to resolve reference "[^"]+": \S+: not found`, err.Error())
	assert.Contains(t, err.Error(), "up stopped waiting instead of running into readiness.timeout, 2h")
	assert.NotContains(t, err.Error(), "made no progress", "terminal at once, not at the deadline")
}

// A rollout whose pods the API server refuses makes no pod to watch: a site's admission policy the
// program does not know (here one refusing the frontend's pods in the namespace) is named from the
// ReplicaSet's FailedCreate event, and up ends at once.
func TestBoxAPodAdmissionRefusesEndsUpAtOnce(t *testing.T) {
	parallelOnBox(t)
	ctx := context.Background()
	const ns = "box-stuck-admission"
	fail := admissionregistrationv1.Fail
	policy := &admissionregistrationv1.ValidatingAdmissionPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: ns + "-no-frontend"},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicySpec{
			FailurePolicy: &fail,
			MatchConstraints: &admissionregistrationv1.MatchResources{ResourceRules: []admissionregistrationv1.NamedRuleWithOperations{{
				RuleWithOperations: admissionregistrationv1.RuleWithOperations{
					Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
					Rule:       admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}},
				}}}},
			Validations: []admissionregistrationv1.Validation{{
				Expression: `!has(object.metadata.labels) || !('nvidia.com/dynamo-component' in object.metadata.labels) || object.metadata.labels['nvidia.com/dynamo-component'] != 'Frontend'`,
				Message:    "the site serves no frontend here",
			}},
		},
	}
	binding := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
		ObjectMeta: metav1.ObjectMeta{Name: policy.Name},
		Spec: admissionregistrationv1.ValidatingAdmissionPolicyBindingSpec{
			PolicyName:        policy.Name,
			ValidationActions: []admissionregistrationv1.ValidationAction{admissionregistrationv1.Deny},
			MatchResources: &admissionregistrationv1.MatchResources{NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{corev1.LabelMetadataName: ns}}},
		},
	}
	rack := addRack(t, rackbox.NVL72("stuck-admission").WithGPUs(12)) // starts the box
	for _, o := range []client.Object{policy, binding} {
		require.NoError(t, box.Client.Create(ctx, o))
		t.Cleanup(func() { _ = box.Client.Delete(context.Background(), o) })
	}
	s := stuckStack(t, ns, rack, "", "")
	err := stuckUp(t, s, 6*time.Minute)
	assert.Regexp(t, `DynamoGraphDeployment `+ns+`/`+aggGraph+` cannot become Ready without a change: FailedCreate: ReplicaSet `+aggGraph+`-frontend-\S+ makes no pod: `+
		`Error creating: pods "…" is forbidden: ValidatingAdmissionPolicy '`+policy.Name+`' with binding '`+policy.Name+`' denied request: the site serves no frontend here`, err.Error())
	assert.NotContains(t, err.Error(), "made no progress", "terminal at once, not at the deadline")
}

// A registry that times out may answer: shown while up waits, and up ends at the progress deadline
// naming it, not before.
func TestBoxARegistryTimeoutEndsAtTheProgressDeadline(t *testing.T) {
	parallelOnBox(t)
	const ns = "box-stuck-registry"
	s := stuckStack(t, ns, addRack(t, rackbox.NVL72("stuck-registry").WithGPUs(12)), "45s", rackbox.TroubleRegistryTimeout)
	err := stuckUp(t, s, 8*time.Minute)
	log := s.log.String()
	assert.Regexp(t, `container main: ErrImagePull: [^\n]*i/o timeout \(up waits for Ready until readiness.timeout, 2h, in case it clears`, log,
		"shown while up waits: not terminal")
	assert.Regexp(t, `DynamoGraphDeployment `+ns+`/`+aggGraph+` made no progress: no pod of the graph came further \(created, scheduled, started, Ready\) for 45s \(readiness.progressDeadline\) while: `+
		`pod \S+ \(component Frontend\) on node \S+, container main: ErrImagePull: [^\n]*i/o timeout`, err.Error())
	assert.Contains(t, err.Error(), "up stopped waiting instead of running into readiness.timeout, 2h")
	assert.Contains(t, err.Error(), "check that the nodes reach the registry and that the image exists")
}

// A frontend whose readiness probe never passes: named from the kubelet's Unhealthy event while up
// waits, and up ends at the progress deadline naming it.
func TestBoxAFrontendNeverReadyIsNamedAndEndsAtTheDeadline(t *testing.T) {
	parallelOnBox(t)
	const ns = "box-stuck-probe"
	s := stuckStack(t, ns, addRack(t, rackbox.NVL72("stuck-probe").WithGPUs(12)), "45s", rackbox.TroubleNeverReady)
	err := stuckUp(t, s, 8*time.Minute)
	assert.Regexp(t, `pod \S+ \(component Frontend\) on node \S+: Unhealthy: Readiness probe failed: HTTP probe failed with statuscode: 503 \(up waits`, s.log.String())
	assert.Regexp(t, `made no progress: [^\n]*for 45s \(readiness.progressDeadline\) while: pod \S+ \(component Frontend\)[^\n]*Unhealthy: Readiness probe failed`, err.Error())
	assert.Contains(t, err.Error(), "kubectl logs")
}

// An IMEX daemon that never gets Ready holds its tray's worker (its channel claim is never
// prepared): up ends at the progress deadline naming the tray, the ComputeDomain and the chain's
// stages (the daemon pod runs but is not Ready, so the tray is NotReady in the domain).
func TestBoxAnIMEXDaemonNeverReadyEndsAtTheDeadline(t *testing.T) {
	parallelOnBox(t)
	ctx := context.Background()
	const ns = "box-stuck-imex"
	r := addRack(t, rackbox.NVL72("stuck-imex").WithGPUs(12))
	tray := r.NodeNames()[0]
	require.NoError(t, box.AnnotateNode(ctx, tray, rackbox.IMEXTroubleAnnotation, rackbox.TroubleNeverReady))
	t.Cleanup(func() { _ = box.AnnotateNode(context.Background(), tray, rackbox.IMEXTroubleAnnotation, "") })
	s := stuckStack(t, ns, r, "45s", "")
	err := stuckUp(t, s, 8*time.Minute)
	assert.Regexp(t, fmt.Sprintf(`made no progress: [^\n]*on node %[1]s: FailedPrepareDynamicResources: [^\n]*IMEX chain of ComputeDomain %[2]s on node %[1]s: `+
		`IMEX daemon pod %[3]s/\S+ runs but is not Ready [^→]* → the node is NotReady in the domain's status.nodes`,
		regexp.QuoteMeta(tray), regexp.QuoteMeta(aggGraph+"-cd"), rackbox.DriverNamespace), err.Error())
	assert.Contains(t, err.Error(), "kubectl -n nvidia-dra-driver-gpu get pods -o wide")
}
