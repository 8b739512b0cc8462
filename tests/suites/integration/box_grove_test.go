package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	grovecrds "github.com/ai-dynamo/grove/operator/api/core/v1alpha1/crds"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"minimax-m3/tests/framework/dynamooperator"
	"minimax-m3/tests/framework/rackbox"
)

var podCliqueSets = schema.GroupVersionKind{Group: "grove.io", Version: "v1alpha1", Kind: "PodCliqueSetList"}

// On a cluster with Grove's API the Dynamo operator runs every new graph through Grove unless the
// graph opts out, and Grove ignores the rollout annotations and placement the program writes. The
// operator decides whether Grove is there when it starts, so this test has a box of its own: Grove's
// CRDs (from Grove's API module; no Grove operator runs, so a graph on the Grove path gets its
// PodCliqueSet and never any pod) installed before its own operator starts. The program's graph
// stays on the component path, which the test reads back from the operator; the recipe's graph,
// applied with kubectl, goes to Grove, and a stack adopting it is refused before anything changes.
func TestBoxOnAClusterWithGroveTheGraphStaysOnTheComponentPath(t *testing.T) {
	parallel(t)
	ctx := context.Background()
	log := &syncBuffer{}
	gb, err := rackbox.Start(ctx, rackbox.Options{Bin: cluster.bin, CRDs: os.Getenv("MINIMAX_M3_CRDS"), Log: log})
	require.NoError(t, err)
	gb.StopBefore(testTimeout)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("grove box logs:\n%s\n--- operator\n%s", gb.Logs(), tail(log.String(), 8<<10))
		}
		_ = gb.Stop()
	})
	var crds []*apiextensionsv1.CustomResourceDefinition
	for _, text := range []string{grovecrds.PodCliqueSetCRD(), grovecrds.PodCliqueCRD(), grovecrds.PodCliqueScalingGroupCRD(), grovecrds.ClusterTopologyCRD()} {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		require.NoError(t, yaml.Unmarshal([]byte(text), crd))
		crds = append(crds, crd)
	}
	_, err = envtest.InstallCRDs(gb.Config, envtest.CRDInstallOptions{CRDs: crds, MaxTime: time.Minute})
	require.NoError(t, err, "Grove's CRDs")
	op, err := dynamooperator.Start(ctx, dynamooperator.Options{
		Binary: filepath.Join(cluster.bin, "dynamo-operator"), Kubeconfig: gb.Kubeconfig, Config: gb.Config,
		CRDDir: filepath.Join(operatorSource(), "config", "crd", "bases"), Log: log,
	})
	require.NoError(t, err, tail(log.String(), 8<<10))
	t.Cleanup(func() { _ = op.Stop() })
	r := rackbox.NVL72("grove").WithGPUs(12)
	require.NoError(t, gb.AddRack(ctx, r))

	ns := "box-grove"
	s := newBoxStackOn(t, gb.Kubeconfig, "agg", ns, r, nil)
	upOK(t, s)
	g, _ := getOn(t, gb.Client, graphGVK, ns, aggGraph)
	require.NotNil(t, g)
	assert.Equal(t, "false", g.GetAnnotations()["nvidia.com/enable-grove"], "the program opts out")
	assert.Equal(t, "component", g.GetAnnotations()["nvidia.com/workload-provider"], "the operator chose its component path")
	sets := &unstructured.UnstructuredList{}
	sets.SetGroupVersionKind(podCliqueSets)
	require.NoError(t, gb.Client.List(ctx, sets, client.InNamespace(ns)))
	assert.Empty(t, sets.Items, "no PodCliqueSet for the program's graph")
	t.Log("path: the operator's component path (DynamoComponentDeployments), on an operator with Grove enabled")

	// The recipe's graph on the same cluster, applied as the recipe does: the operator takes it to
	// Grove, and the program will not adopt it.
	recipe := "box-grove-recipe"
	kubectl := func(args ...string) {
		out, err := exec.Command("kubectl", append([]string{"--kubeconfig", gb.Kubeconfig}, args...)...).CombinedOutput()
		require.NoError(t, err, string(out))
	}
	kubectl("create", "namespace", recipe)
	kubectl("-n", recipe, "apply", "-f", filepath.Join(recipeDir(t), "vllm", "agg-gb200-agentic", "deploy.yaml"))
	eventually(t, 2*time.Minute, "the operator picks Grove for the recipe's graph", func(ctx context.Context) (bool, error) {
		g, _, err := tryGetOn(ctx, gb.Client, graphGVK, recipe, aggGraph)
		return g != nil && g.GetAnnotations()["nvidia.com/workload-provider"] == "grove", err
	})
	t.Log("path: Grove, for the recipe's graph applied with kubectl")
	adopter := makeStack(t, gb.Kubeconfig, "agg", recipe, auto.ConfigMap{
		"minimax-m3:namespace.create":      {Value: "false"},
		"minimax-m3:modelDownload.enabled": {Value: "false"},
		"minimax-m3:adopt":                 {Value: "true"},
	}, nil)
	_, err = adopter.preview(ctx)
	require.Error(t, err)
	assert.Contains(t, adopter.log.String()+err.Error(), `minimax-m3:graphName: the Dynamo operator runs DynamoGraphDeployment box-grove-recipe/`+aggGraph+` through "grove"`)
}
