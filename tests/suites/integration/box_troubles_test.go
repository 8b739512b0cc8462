package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/tests/framework/poll"
	"minimax-m3/tests/framework/rackbox"
)

// What goes wrong after a pod is placed is in `up`'s output as Kubernetes reports it, with the pod,
// node and container, while `up` still waits. The box plays each failure (rackbox's troubles: the
// status a kubelet writes, since no image is pulled and no process runs here): the frontend's image
// cannot be pulled, the prefill workers crash at every start, the decode workers are OOMKilled, and
// the node under a prefill worker stops reporting. Each line comes from the program's watch of the
// graph's pods and nodes while the provider waits; readiness.timeout (90 s) ends the wait, so each
// was shown within that of the box producing it.
func TestBoxUpNamesWhatKeepsPodsFromRunning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const ns = "box-troubles"
	r := addRack(t, rackbox.NVL72("troubles").WithGPUs(24))
	trouble := func(role string) string {
		return fmt.Sprintf("minimax-m3:%s.podAnnotations[%q]", role, rackbox.TroubleAnnotation)
	}
	s := newBoxStack(t, "disagg", ns, r, auto.ConfigMap{
		"minimax-m3:readiness.timeout": {Value: "90s"},
		trouble("frontend"):            {Value: rackbox.TroubleImagePull},
		trouble("prefillWorker"):       {Value: rackbox.TroubleCrashLoop},
		trouble("decodeWorker"):        {Value: rackbox.TroubleOOMKilled},
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
	want := map[string]string{
		"Frontend":      `, container main: ImagePullBackOff: Back-off pulling image "`,
		"PrefillWorker": ", container main: CrashLoopBackOff (3 restarts, last exit Error, code 1): back-off 40s restarting failed container=main pod=",
		"DecodeWorker":  ", container main: OOMKilled (1 restarts, last exit OOMKilled, code 137): back-off 10s",
	}
	seen := map[string]int{}
	for _, p := range pods {
		component := p.Labels["nvidia.com/dynamo-component"]
		if want[component] == "" || p.Spec.NodeName == "" {
			continue
		}
		seen[component]++
		assert.Contains(t, log, fmt.Sprintf("DynamoGraphDeployment %s/%s: pod %s (component %s) on node %s%s", ns, disaggGraph, p.Name, component, p.Spec.NodeName, want[component]), component)
		if p.Spec.NodeName == node {
			assert.Contains(t, log, fmt.Sprintf("pod %s (component %s) on node %s: NodeNotReady: Ready is Unknown: NodeStatusUnknown Kubelet stopped posting node status.", p.Name, component, node))
		}
	}
	assert.Equal(t, map[string]int{"Frontend": 1, "PrefillWorker": 3, "DecodeWorker": 3}, seen, "every pod of the graph was placed and is named")
	// The crash loop and the OOM kill cannot clear by themselves; the pull back-off may.
	assert.Contains(t, log, "code 137): back-off 10s restarting failed container=main pod=")
	assert.Regexp(t, `OOMKilled \(1 restarts[^\n]*\(this does not clear without a change`, log)
	assert.Regexp(t, `ImagePullBackOff: [^\n]*\(up waits for Ready until readiness.timeout, 90s, in case it clears`, log)
	assert.Contains(t, err.Error(), "timed out", "the provider's wait ends at readiness.timeout")
}
