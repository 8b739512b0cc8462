package unit

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"

	"minimax-m3/benchmark"
)

func heldLease(run string, renewed time.Time) *coordinationv1.Lease {
	t := metav1.NewMicroTime(renewed)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: "inference", Name: benchmark.LeaseName, Labels: map[string]string{"minimax-m3.io/graph": "g"}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(run), LeaseDurationSeconds: ptr.To[int32](90), RenewTime: &t},
	}
}

// One sweep per namespace: a Lease another run renewed within its duration refuses the sweep
// with that run's ID, before anything is created; one its holder stopped renewing (a killed sweep)
// is taken over, and released when the sweep ends, here at its first error (the graph has no
// pods). (A fake clientset stands for the API server: the Lease's compare-and-swap is the same
// resourceVersion check; the rack box runs two sweeps against the real one.)
func TestBenchmarkSweepsTakeTheNamespacesLease(t *testing.T) {
	ctx := context.Background()
	c := disaggConfig(t, map[string]string{"benchmark": `{"enabled": true}`})
	newSweep := func(kube *fake.Clientset, run string) *benchmark.Sweep {
		return &benchmark.Sweep{Config: &c, Namespace: "inference", Kube: kube, Concurrency: []int{8}, RunID: run, OutDir: t.TempDir()}
	}

	renewed := time.Now().Add(-10 * time.Second)
	kube := fake.NewClientset(heldLease("first", renewed))
	_, err := newSweep(kube, "second").Run(ctx)
	var busy *benchmark.BusyError
	require.ErrorAs(t, err, &busy)
	assert.Equal(t, "first", busy.RunID)
	// The age is the Lease's renewal 10 s ago plus however long the run took to read it (whole
	// seconds): between 10 s and the time since the renewal.
	m := regexp.MustCompile(`sweep first \(graph g\) is running in namespace inference: its Lease minimax-m3-benchmark was renewed (\d+)s ago`).FindStringSubmatch(err.Error())
	if assert.NotNil(t, m, err.Error()) {
		age, _ := strconv.Atoi(m[1])
		assert.GreaterOrEqual(t, age, 10)
		assert.LessOrEqual(t, age, int(math.Ceil(time.Since(renewed).Seconds())))
	}
	assert.Empty(t, kube.Actions()[1:], "nothing but the Lease read")

	kube = fake.NewClientset(heldLease("killed", time.Now().Add(-5*time.Minute)))
	_, err = newSweep(kube, "second").Run(ctx)
	require.ErrorContains(t, err, "graph "+c.GraphName+" has no running pods")
	var took bool
	for _, a := range kube.Actions() {
		if a.GetVerb() == "update" && a.GetResource().Resource == "leases" {
			took = true
		}
	}
	assert.True(t, took, "the expired Lease taken over")
	_, err = kube.CoordinationV1().Leases("inference").Get(ctx, benchmark.LeaseName, metav1.GetOptions{})
	assert.True(t, apierrors.IsNotFound(err), "released at the end")

	// A run ID is a label value, short enough for its restart IDs; an error budget is a share.
	bad := newSweep(fake.NewClientset(), "run/1")
	bad.ErrorBudget = 2
	_, err = bad.Run(ctx)
	require.ErrorContains(t, err, `run ID "run/1": 1 to 40 letters, digits`)
	require.ErrorContains(t, err, "error budget 2: a share of the requests, from 0 to 1")
}

// Resuming needs the interrupted sweep's directory, and its conditions; a directory holding a
// sweep is never overwritten by another.
func TestBenchmarkResumeChecksItsSweep(t *testing.T) {
	ctx := context.Background()
	c := disaggConfig(t, map[string]string{"benchmark": `{"enabled": true}`})
	out := t.TempDir()
	s := &benchmark.Sweep{Config: &c, Namespace: "inference", Kube: fake.NewClientset(), Concurrency: []int{8, 16}, RunID: "r1", OutDir: out, Resume: true}
	_, err := s.Run(ctx)
	require.ErrorContains(t, err, "has no sweep.json: there is no sweep to resume there")

	writeMeta := func(m benchmark.Metadata) {
		b, err := json.Marshal(m)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(out, benchmark.MetadataFile), b, 0o644))
	}
	writeMeta(benchmark.Metadata{RunID: "r1", Graph: c.GraphName, Namespace: "inference", Concurrency: []int{8, 32}, GPUs: 24,
		SpeculativeMode: "synthetic", NumSpeculativeTokens: 3, AIPerfImage: c.Benchmark.Image, TraceFile: c.Benchmark.TraceFile,
		TraceSHA256: c.Benchmark.TraceSHA256, RestartedBy: benchmark.RestartPods})
	_, err = s.Run(ctx)
	require.ErrorContains(t, err, "ran under other conditions, so its points and this run's would not compare: concurrency was [8 32], is [8 16]; speculativeDecoding.mode was synthetic, is real")

	s.Resume = false
	_, err = s.Run(ctx)
	require.ErrorContains(t, err, out+" holds sweep r1 already: resume it (-resume) or choose another output directory")
}
