package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"minimax-m3/tests/framework/dynamooperator"
	"minimax-m3/tests/framework/rackbox"
)

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
		box.operator, box.err = startBoxOperator()
	})
	require.NoError(t, box.err, "the rack box cannot start\n%s", boxLogs())
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("rack box logs:\n%s", boxLogs())
		}
	})
	return box.Box
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
// a GB200 pool: a node selector for the pool (here the test's rack), the arm64 taint tolerated,
// and placement.topologyKey keeping them in one NVLink clique. The smoke test runs (its pod's
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
		for k, v := range map[string]string{"key": corev1.LabelArchStable, "operator": "Equal", "value": "arm64", "effect": "NoSchedule"} {
			cfg[fmt.Sprintf("minimax-m3:%s.scheduling.tolerations[0].%s", role, k)] = auto.ConfigValue{Value: v}
		}
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

// podsOf lists the pods in ns that match labels.
func podsOf(t *testing.T, ns string, labels client.MatchingLabels) []corev1.Pod {
	t.Helper()
	var pods corev1.PodList
	require.NoError(t, box.Client.List(context.Background(), &pods, client.InNamespace(ns), labels))
	return slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool { return p.DeletionTimestamp != nil })
}

// eventually is require.Eventually with the box's logs on failure.
func eventually(t *testing.T, cond func() bool, timeout time.Duration, what string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, timeout, 250*time.Millisecond, append([]any{what}, args...)...)
}

// heldDownload waits for the download Job's pod of a stack whose modelDownload.image is
// rackbox.HeldImage to run (the box holds it), and returns a function that ends it with exit code
// 0, so that the Job controller completes the Job.
func heldDownload(t *testing.T, ns string) (release func()) {
	t.Helper()
	downloads := client.MatchingLabels{"batch.kubernetes.io/job-name": "minimax-m3-model-download"}
	eventually(t, func() bool {
		pods := podsOf(t, ns, downloads)
		return len(pods) == 1 && pods[0].Status.Phase == corev1.PodRunning
	}, 2*time.Minute, "the download Job's pod runs (held by the box)")
	return func() {
		t.Helper()
		held := podsOf(t, ns, downloads)[0]
		patch := client.MergeFrom(held.DeepCopy())
		held.Annotations = map[string]string{rackbox.ExitCodeAnnotation: "0"}
		require.NoError(t, box.Client.Patch(context.Background(), &held, patch))
	}
}
