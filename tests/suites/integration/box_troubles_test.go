package integration

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/tests/framework/poll"
	"minimax-m3/tests/framework/rackbox"
)

// What goes wrong after a pod is placed is in `up`'s output as Kubernetes reports it, with the pod,
// node and container, while `up` waits. The box plays each failure (rackbox's troubles: the status a
// kubelet writes, since no image is pulled and no process runs here): the frontend's image cannot
// be pulled, the prefill workers never pass their readiness probe, and the node under a prefill
// worker stops reporting. None of these is sure not to clear by itself, so `up` waits them out
// until readiness.timeout (90 s), and its error then names the operator's last Ready condition and
// what it saw; each line was shown within that of the box producing it.
func TestBoxUpNamesWhatKeepsPodsFromRunning(t *testing.T) {
	parallelOnBox(t)
	ctx := context.Background()
	const ns = "box-troubles"
	r := addRack(t, rackbox.NVL72("troubles").WithGPUs(24))
	s := newBoxStack(t, "disagg", ns, r, auto.ConfigMap{
		"minimax-m3:readiness.timeout": {Value: "90s"},
		troubleKey("frontend"):         {Value: rackbox.TroubleImagePull},
		troubleKey("prefillWorker"):    {Value: rackbox.TroubleNeverReady},
	})

	done := make(chan error, 1)
	go func() {
		_, _, err := s.up(ctx)
		done <- err
	}()
	// Every pod of the graph placed first: the node made NotReady is tainted unreachable, and a
	// worker still to be placed would find no room left on this rack.
	var node string
	bound := poll.Until(ctx, 5*time.Minute, time.Second, "the graph's 7 pods are bound to nodes", func(ctx context.Context) (bool, error) {
		pods, err := listPods(ctx, ns, client.MatchingLabels{"nvidia.com/dynamo-graph-deployment-name": disaggGraph})
		if err != nil || len(pods) < 7 {
			return false, err
		}
		for _, p := range pods {
			if p.Spec.NodeName == "" {
				return false, nil
			}
			if p.Labels["nvidia.com/dynamo-component"] == "PrefillWorker" {
				node = p.Spec.NodeName
			}
		}
		return true, nil
	})
	if bound == nil {
		bound = rackBox(t).MakeNodeNotReady(ctx, node)
	}
	err := <-done // up ends at readiness.timeout either way
	require.NoError(t, bound, s.log.String())
	require.Error(t, err)
	log := s.log.String()

	pods, lerr := listPods(ctx, ns, client.MatchingLabels{"nvidia.com/dynamo-graph-deployment-name": disaggGraph})
	require.NoError(t, lerr)
	pulls := 0
	for _, p := range pods {
		component := p.Labels["nvidia.com/dynamo-component"]
		if component == "Frontend" {
			pulls++
			assert.Contains(t, log, fmt.Sprintf(`DynamoGraphDeployment %s/%s: pod %s (component Frontend) on node %s, container main: ImagePullBackOff: Back-off pulling image "`, ns, disaggGraph, p.Name, p.Spec.NodeName))
		}
		if p.Spec.NodeName == node {
			assert.Contains(t, log, fmt.Sprintf("pod %s (component %s) on node %s: NodeNotReady: Ready is Unknown: NodeStatusUnknown Kubelet stopped posting node status.", p.Name, component, node))
		}
	}
	assert.Equal(t, 1, pulls, "the frontend was placed and is named")
	// A pull back-off may clear by itself: up says so, and waits.
	assert.Regexp(t, `ImagePullBackOff: [^\n]*\(up waits for Ready until readiness.timeout, 90s, in case it clears`, log)
	assert.Contains(t, err.Error(), fmt.Sprintf("DynamoGraphDeployment %s/%s was not Ready at generation 1 within 1m30s (readiness.timeout, 90s); the operator's Ready condition: False, ", ns, disaggGraph))
	assert.Contains(t, err.Error(), "what kept its pods from running: ")
	assert.NotContains(t, err.Error(), "cannot become Ready without a change", "nothing here is terminal")
}

// A failure that does not clear without a change ends `up` with its reason at once, long before
// readiness.timeout (30 minutes here): the box plays the agg workers' engine exiting at every start
// (CrashLoopBackOff after 3 restarts). The up runs through the portal (HTTP, its event stream), so
// the same lines reach a portal user: the crash loop as a warning while it waits, then the
// operation's error. The graph is left as it is, for the user to look at.
func TestBoxUpStopsOnAFailureThatDoesNotClear(t *testing.T) {
	parallelOnBox(t)
	const ns, stack = "box-crash", "agg-crash"
	r := addRack(t, rackbox.NVL72("crash").WithGPUs(12))
	_, c := boxPortal(t, stack)
	code, body := c.do(http.MethodPost, "/api/stacks/"+stack+"/up", map[string]any{"base": "agg", "hfToken": portalToken, "config": map[string]any{
		"namespace": map[string]any{"name": ns}, "readiness": map[string]any{"timeout": "30m"}, "placement": map[string]any{"topologyKey": rackbox.CliqueLabel},
		"worker": map[string]any{"scheduling": map[string]any{"nodeSelector": map[string]any{rackbox.RackLabel: r.Name}},
			"podAnnotations": map[string]any{rackbox.TroubleAnnotation: rackbox.TroubleCrashLoop}},
	}})
	require.Equal(t, http.StatusAccepted, code, string(body))
	events, errText := c.sse(stack)
	require.NotEmpty(t, errText, "the up fails")
	assert.Regexp(t, `DynamoGraphDeployment box-crash/`+aggGraph+` cannot become Ready without a change: pod \S+ \(component Worker\) on node \S+, container main: `+
		`CrashLoopBackOff \(3 restarts, last exit Error, code 1\): back-off 40s`, errText)
	assert.Contains(t, errText, "up stopped waiting instead of running into readiness.timeout, 30m")
	var warned bool
	for _, e := range events {
		if strings.Contains(e.Message, "CrashLoopBackOff (3 restarts") && strings.Contains(e.Message, "(this does not clear without a change: docs/day-two.md#troubleshooting)") {
			warned = true
			assert.Equal(t, "graph", e.Name, "on the graph's row: %+v", e)
		}
	}
	assert.True(t, warned, "the portal's event stream shows the crash loop while up waits: %+v", events)
	_, exists := getOn(t, box.Client, graphGVK, ns, aggGraph)
	assert.True(t, exists, "the graph stays for the user to look at")
}

// troubleKey is the config key of a role's pod annotation that makes the box play a trouble.
func troubleKey(role string) string {
	return fmt.Sprintf("minimax-m3:%s.podAnnotations[%q]", role, rackbox.TroubleAnnotation)
}

// A worker waits for the IMEX daemon of its tray (the box plays the DRA driver's kubelet plugin and
// the daemon; the compute-domain-controller and its DaemonSet are real): on one tray the daemon runs
// but never gets Ready, on another its image cannot be pulled. `up` names what each worker waits
// for, from the kubelet's events and the ComputeDomain's status, and goes on waiting (neither is
// terminal); once the trays' daemons are replaced by healthy ones, the workers start and `up`
// ends Ready.
func TestBoxAWorkerWaitsForItsTraysIMEXDaemon(t *testing.T) {
	parallelOnBox(t)
	ctx := context.Background()
	const ns = "box-imex"
	r := addRack(t, rackbox.NVL72("imex").WithGPUs(12))
	trays := r.NodeNames()
	troubled := map[string]string{trays[0]: rackbox.TroubleNeverReady, trays[1]: rackbox.TroubleImagePull}
	for tray, trouble := range troubled {
		require.NoError(t, box.AnnotateNode(ctx, tray, rackbox.IMEXTroubleAnnotation, trouble))
	}
	s := newBoxStack(t, "agg", ns, r, nil)
	done := make(chan error, 1)
	go func() {
		_, _, err := s.up(ctx)
		done <- err
	}()
	// The chain stage by stage: the daemon pod (its state), the tray in the domain's status, the claim.
	want := map[string]string{
		trays[0]: `IMEX chain of ComputeDomain \S+ on node ` + regexp.QuoteMeta(trays[0]) + `: IMEX daemon pod ` + rackbox.DriverNamespace + `/\S+ runs but is not Ready [^→]*` +
			` → the node is NotReady in the domain's status.nodes [^→]* → so the worker's channel claim is not prepared`,
		trays[1]: `IMEX chain of ComputeDomain \S+ on node ` + regexp.QuoteMeta(trays[1]) + `: IMEX daemon pod ` + rackbox.DriverNamespace + `/\S+ is Pending, ` +
			`container compute-domain-daemon: (ErrImagePull|ImagePullBackOff): [^→]* → the node is not in the domain's status.nodes`,
	}
	named := poll.Until(ctx, 3*time.Minute, time.Second, "up names what the workers on both troubled trays wait for", func(context.Context) (bool, error) {
		log := s.log.String()
		for tray, says := range want {
			if !regexp.MustCompile(`pod \S+ \(component Worker\) on node ` + regexp.QuoteMeta(tray) + `: FailedPrepareDynamicResources: Failed to prepare dynamic resources: ` +
				`prepare dynamic resources: NodePrepareResources: rpc error: code = DeadlineExceeded desc = context deadline exceeded \([^\n]*` + says).MatchString(log) {
				return false, nil
			}
		}
		return true, nil
	})
	// Healthy daemons in their place: the troubles off the trays, the troubled daemons deleted (their
	// DaemonSet makes new ones).
	for tray := range troubled {
		require.NoError(t, box.AnnotateNode(ctx, tray, rackbox.IMEXTroubleAnnotation, ""))
	}
	var daemons corev1.PodList
	require.NoError(t, box.Client.List(ctx, &daemons, client.InNamespace(rackbox.DriverNamespace)))
	for _, p := range daemons.Items {
		if _, ok := troubled[p.Spec.NodeName]; ok {
			require.NoError(t, client.IgnoreNotFound(box.Client.Delete(ctx, &p)))
		}
	}
	err := <-done
	require.NoError(t, named, s.log.String())
	require.NoError(t, err, s.log.String())
	assert.NotContains(t, s.log.String(), "cannot become Ready without a change")
	for _, p := range podsOf(t, ns, client.MatchingLabels{"nvidia.com/dynamo-component": "Worker"}) {
		assert.Equal(t, "true", p.Annotations[rackbox.ClaimsPreparedAnnotation], "%s started once its claim was prepared", p.Name)
	}
}
