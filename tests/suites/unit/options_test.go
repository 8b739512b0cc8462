package unit

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"minimax-m3/components"
	"minimax-m3/config"
)

// What the user owns survives config changes and destroy; what must be replaced is replaced safely.

func TestCacheClaimIsKeptOnDestroyAndNeverReplaced(t *testing.T) {
	for _, p := range profiles {
		t.Run(p.stack, func(t *testing.T) {
			r := mustRun(t, p.stack, nil)
			pvc := r.one(t, "kubernetes:core/v1:PersistentVolumeClaim")
			require.NotNil(t, pvc.RPC)
			assert.True(t, pvc.RPC.GetRetainOnDelete(), "destroy keeps the cache")
			assert.Subset(t, pvc.RPC.GetIgnoreChanges(), []string{"spec.storageClassName", "spec.accessModes"}, "immutable fields never force a replacement")
			assert.Equal(t, "true", decode[map[string]string](t, pvc, "metadata", "annotations")["pulumi.com/skipAwait"],
				"no fixed five-minute wait for binding")
			ns := r.one(t, "kubernetes:core/v1:Namespace")
			assert.True(t, ns.RPC.GetRetainOnDelete(), "the namespace holding a kept cache is kept too")
		})
	}
}

func TestDeleteOnDestroyLetsTheClaimAndNamespaceGo(t *testing.T) {
	r := mustRun(t, "agg", map[string]string{"minimax-m3:modelCache": `{"storageClass": "rwx-fast", "deleteOnDestroy": true}`})
	assert.False(t, r.one(t, "kubernetes:core/v1:PersistentVolumeClaim").RPC.GetRetainOnDelete())
	assert.False(t, r.one(t, "kubernetes:core/v1:Namespace").RPC.GetRetainOnDelete())
}

func TestDownloadJobIsReplacedDeleteFirstAndBoundedByItsTimeout(t *testing.T) {
	job := mustRun(t, "disagg", map[string]string{"minimax-m3:modelDownload": `{"timeout": "90m"}`}).one(t, "kubernetes:batch/v1:Job")
	assert.True(t, job.RPC.GetDeleteBeforeReplace(), "the Job keeps its name across revisions")
	assert.Equal(t, 5400, decode[int](t, job, "spec", "template", "spec", "activeDeadlineSeconds"), "each attempt gets the whole timeout")
	// 4 attempts (backoffLimit 3) of 90m plus a minute each to start, and 10s+20s+40s of back-off.
	assert.Equal(t, 4*91*60+70, decode[int](t, job, "spec", "activeDeadlineSeconds"), "the Job's deadline covers every retry")
	assert.Equal(t, "6h15m10s", job.RPC.GetCustomTimeouts().GetCreate(), "Kubernetes' deadline fires before the provider's")
}

func TestDownloadDeadlinesCapTheBackOff(t *testing.T) {
	attempt, whole := components.DownloadDeadlines(config.ModelDownloadConfig{Timeout: "1m", BackoffLimit: 8})
	assert.Equal(t, time.Minute, attempt)
	// back-off 10s, 20s, 40s, 80s, 160s, 320s, then capped at 6m twice
	assert.Equal(t, 9*2*time.Minute+(630*time.Second)+12*time.Minute, whole)
	_, none := components.DownloadDeadlines(config.ModelDownloadConfig{Timeout: "1m"})
	assert.Equal(t, 2*time.Minute, none, "no retry, no back-off")
}

// The graph names the Job and the ComputeDomain themselves, not their components: the SDK
// records a component's children as their registrations start, so depending on a component
// registered just before could miss them (this failed about one run in a few hundred under -race).
func TestGraphWaitsForTheDownloadAndTheComputeDomain(t *testing.T) {
	r := mustRun(t, "agg", nil)
	graph := r.one(t, "minimax-m3:index:DynamoGraph")
	deps := strings.Join(graph.RPC.GetDependencies(), " ")
	assert.Contains(t, deps, "kubernetes:batch/v1:Job::model-download")
	assert.Contains(t, deps, "kubernetes:resource.nvidia.com/v1beta1:ComputeDomain::compute-domain")
	job := r.one(t, "kubernetes:batch/v1:Job")
	assert.Contains(t, strings.Join(job.RPC.GetDependencies(), " "), "kubernetes:core/v1:Secret::hf-token", "the download waits for its token")
	dgd := r.customResource(t, "DynamoGraphDeployment")
	assert.Equal(t, "2h0m0s", dgd.RPC.GetCustomTimeouts().GetCreate(), "a create starts every pod at once")
	assert.Equal(t, "6h0m0s", dgd.RPC.GetCustomTimeouts().GetUpdate(), "the default rollout replaces 3 workers one at a time")
}

// readiness.timeout bounds one round of pod starts; an update waits for as many rounds as the
// rollouts, or a Sequential restart, take.
func TestTheGraphsUpdateWaitScalesWithItsRollout(t *testing.T) {
	update := func(stack string, overrides map[string]string) string {
		r := mustRun(t, stack, overrides)
		return r.customResource(t, "DynamoGraphDeployment").RPC.GetCustomTimeouts().GetUpdate()
	}
	oneHour := map[string]string{"minimax-m3:readiness": `{"timeout": "1h"}`}
	with := func(extra string) map[string]string {
		m := map[string]string{}
		for k, v := range oneHour {
			m[k] = v
		}
		m["minimax-m3:worker"] = extra
		return m
	}
	assert.Equal(t, "3h0m0s", update("agg", oneHour))
	assert.Equal(t, "1h0m0s", update("agg", with(`{"rollout": {"strategy": "Recreate"}}`)))
	assert.Equal(t, "2h0m0s", update("agg", with(`{"rollout": {"maxUnavailable": "2"}}`)), "2 then 1")
	assert.Equal(t, "3h0m0s", update("agg", with(`{"rollout": {"strategy": "OperatorDefault"}}`)), "25% surge of 3 is 1 pod a round")
	assert.Equal(t, "3h0m0s", update("disagg", oneHour), "prefill and decode roll together")

	// A restart: the operator's Sequential restart takes the frontend, then each worker role.
	restart := func(strategy string) map[string]string {
		return map[string]string{"minimax-m3:readiness": `{"timeout": "1h"}`, "minimax-m3:restart": `{"id": "r1"` + strategy + `}`}
	}
	live := fakeCluster{"dynamographdeployments/inference/minimax-m3-disagg-gb200-agentic": {"@minimax-m3.io/stack": "organization/minimax-m3/disagg"}}
	for strategy, want := range map[string]string{"": "7h0m0s", `, "strategy": "Parallel"`: "3h0m0s"} {
		r, err := runOn(t, live, "disagg", restart(strategy))
		require.NoError(t, err)
		assert.Equal(t, want, r.customResource(t, "DynamoGraphDeployment").RPC.GetCustomTimeouts().GetUpdate(), strategy)
	}
}

func TestEveryResourceBelongsToTheStacksComponents(t *testing.T) {
	r := mustRun(t, "disagg", nil)
	for _, res := range r.resources {
		if res.Type == "pulumi:providers:kubernetes" || res.Type == "minimax-m3:index:Deployment" {
			continue
		}
		assert.Contains(t, res.RPC.GetParent(), "minimax-m3:index:", "%s %s is parented to a component", res.Type, res.Name)
	}
}

// A render reads no cluster: the provider gets an explicitly empty kubeconfig, or the SDK would fill
// it from $KUBECONFIG and the provider refuse it beside the render directory.
func TestRenderIgnoresTheKubeconfigOfTheEnvironment(t *testing.T) {
	t.Setenv("KUBECONFIG", "/home/user/.kube/config")
	r, err := runWith(t, components.Options{RenderDirectory: "/tmp/out", Cluster: fakeCluster{}}, "agg", nil)
	require.NoError(t, err)
	p := plain(t, r.one(t, "pulumi:providers:kubernetes").Inputs)
	assert.Equal(t, "/tmp/out", p["renderYamlToDirectory"])
	assert.Equal(t, "", p["kubeconfig"])
}

// A kubeconfig from config (ESC, another stack's output): the provider gets it as a secret, with
// the context kubernetes.context names; one that is not a kubeconfig, or lacks that context, is
// refused at its key before anything is registered, and nothing of its content is in the message.
func TestAKubeconfigFromConfigReachesTheProviderAsASecret(t *testing.T) {
	const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: gb200-eu
  cluster: {server: "https://gb200-eu.example.com:6443"}
users:
- name: deployer
  user: {token: do-not-print-me}
contexts:
- name: gb200-eu
  context: {cluster: gb200-eu, user: deployer}
- name: gb200-eu-admin
  context: {cluster: gb200-eu, user: deployer}
current-context: gb200-eu
`
	t.Setenv("KUBECONFIG", "/nonexistent/kubeconfig")
	r, err := run(t, "agg", map[string]string{"minimax-m3:kubeconfig": kubeconfig, "minimax-m3:kubernetes": `{"context": "gb200-eu-admin"}`})
	require.NoError(t, err)
	provider := r.one(t, "pulumi:providers:kubernetes")
	assert.True(t, provider.Inputs["kubeconfig"].IsSecret(), "the kubeconfig is a secret in the provider's inputs")
	p := plain(t, provider.Inputs)
	assert.Equal(t, kubeconfig, p["kubeconfig"])
	assert.Equal(t, "gb200-eu-admin", p["context"])

	for _, bad := range []struct {
		overrides map[string]string
		key, want string
	}{
		{map[string]string{"minimax-m3:kubeconfig": "token: do-not-print-me\n  - ["}, "minimax-m3:kubeconfig", "is not a kubeconfig"},
		{map[string]string{"minimax-m3:kubeconfig": kubeconfig, "minimax-m3:kubernetes": `{"context": "gb200-us"}`}, "minimax-m3:kubernetes.context",
			`"gb200-us" is not a context of minimax-m3:kubeconfig (its contexts: gb200-eu, gb200-eu-admin)`},
		{map[string]string{"minimax-m3:kubeconfig": strings.Replace(kubeconfig, "current-context: gb200-eu\n", "", 1)}, "minimax-m3:kubeconfig", "has no current context"},
	} {
		_, err := run(t, "agg", bad.overrides)
		require.Error(t, err)
		assert.Contains(t, err.Error(), bad.key+": "+bad.want)
		assert.NotContains(t, err.Error(), "do-not-print-me")
	}
}
