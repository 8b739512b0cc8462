package integration

import (
	"context"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optdestroy"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestFailedDownloadFailsUpWithTheJobsReason(t *testing.T) {
	ctx := context.Background()
	ns := "failed-download"
	s := newStack(t, "agg", ns, nil)
	// The test plays the Job controller: the download fails past its backoff limit.
	stop := playControllers(t, ns, controllers{jobOutcome: "fail", graphReady: true})
	defer stop()
	_, _, err := s.up(ctx)
	require.Error(t, err)
	// The reason shows the provider failed on the Job's condition, not at the download timeout.
	assert.Contains(t, err.Error(), "[BackoffLimitExceeded]")
	assert.NotContains(t, err.Error(), "timed out")
	_, exists := get(t, graphGVK, ns, "minimax-m3-agg-gb200-agentic")
	assert.False(t, exists, "no graph is created without the model")
}

func TestGraphThatNeverBecomesReadyFailsUpWithATimeout(t *testing.T) {
	ctx := context.Background()
	ns := "never-ready"
	s := newStack(t, "disagg", ns, auto.ConfigMap{"minimax-m3:readiness.timeout": {Value: "20s"}})
	// The test plays the Job controller, but no Dynamo operator ever marks the graph Ready.
	stop := playControllers(t, ns, controllers{jobOutcome: "complete"})
	defer stop()
	_, _, err := s.up(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment::graph", "the error names the graph resource")
	assert.Contains(t, err.Error(), "timed out")
}

func TestBadConfigFailsPreviewBeforeAnyObjectExists(t *testing.T) {
	ctx := context.Background()
	ns := "bad-config"
	s := newStack(t, "agg", ns, auto.ConfigMap{
		"minimax-m3:worker.tensorParallelSize": {Value: "3"},
		"minimax-m3:modelCache.storageClass":   {Value: "your-storage-class-name"},
	})
	_, err := s.preview(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error()+s.log.String(), "minimax-m3:worker.tensorParallelSize")
	assert.Contains(t, err.Error()+s.log.String(), "minimax-m3:modelCache.storageClass")
	_, _, err = s.up(ctx)
	require.Error(t, err)
	_, exists := get(t, namespaceGVK, "", ns)
	assert.False(t, exists, "nothing reached the API server")
}

func TestAdoptedNamespaceAndSecretAreLeftAlone(t *testing.T) {
	ctx := context.Background()
	ns := "adopted"
	require.NoError(t, cluster.client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "team-hf", Namespace: ns},
		StringData: map[string]string{"HF_TOKEN": "hf_brought_by_the_user"},
	}
	require.NoError(t, cluster.client.Create(ctx, secret))

	s := newStack(t, "agg", ns, auto.ConfigMap{
		"minimax-m3:namespace.create":           {Value: "false"},
		"minimax-m3:huggingFace.secretName":     {Value: "team-hf"},
		"minimax-m3:huggingFace.existingSecret": {Value: "true"},
		"minimax-m3:modelCache.deleteOnDestroy": {Value: "true"},
	})
	require.NoError(t, s.stack.RemoveConfig(ctx, "minimax-m3:hfToken"))
	stop := playControllers(t, ns, controllers{jobOutcome: "complete", graphReady: true})
	_, ops, err := s.up(ctx)
	stop()
	require.NoError(t, err, s.log.String())
	for k := range opsOf(ops) {
		assert.NotRegexp(t, "^kubernetes:core/v1:(Namespace|Secret) ", k, "an adopted namespace or Secret is not managed")
	}

	stop = playControllers(t, ns, controllers{})
	_, err = s.stack.Destroy(ctx, optdestroy.ProgressStreams(s.log))
	stop()
	require.NoError(t, err, s.log.String())
	_, kept := get(t, namespaceGVK, "", ns)
	assert.True(t, kept, "the adopted namespace stays")
	live, kept := get(t, secretGVK, ns, "team-hf")
	require.True(t, kept, "the adopted Secret stays")
	assert.Empty(t, live.GetLabels(), "the adopted Secret is untouched")
	_, exists := get(t, pvcGVK, ns, "shared-model-cache")
	assert.False(t, exists, "deleteOnDestroy lets destroy delete the cache claim")
}
