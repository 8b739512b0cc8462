package unit

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/theory/jsonpath"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"minimax-m3/components"
	"minimax-m3/config"
	"minimax-m3/manifest"
)

// Day-two changes: what a change reaches, what it leaves alone, and what a stack may take over.

const newDraftRevision = "0123456789abcdef0123456789abcdef01234567"

func workerAnnotations(t *testing.T, r *result) []map[string]string {
	var out []map[string]string
	for _, c := range graphSpec(t, r).Components[1:] {
		out = append(out, c.PodTemplate.Annotations)
	}
	return out
}

func TestADraftChangeRollsTheWorkersThroughAChecksum(t *testing.T) {
	for _, p := range profiles {
		t.Run(p.stack, func(t *testing.T) {
			before := mustRun(t, p.stack, nil)
			for _, a := range workerAnnotations(t, before) {
				assert.NotContains(t, a, manifest.SpeculativeConfigChecksum, "the recipe's own config carries no checksum")
			}
			after := mustRun(t, p.stack, map[string]string{"minimax-m3:model": `{"draft": {"revision": "` + newDraftRevision + `"}}`})
			sums := map[string]bool{}
			for _, a := range workerAnnotations(t, after) {
				require.Contains(t, a, manifest.SpeculativeConfigChecksum)
				assert.Len(t, a[manifest.SpeculativeConfigChecksum], 64)
				sums[a[manifest.SpeculativeConfigChecksum]] = true
			}
			assert.Len(t, sums, 1, "every worker role reads the same config")

			tokens := mustRun(t, p.stack, map[string]string{"minimax-m3:speculativeDecoding": `{"numSpeculativeTokens": 2}`})
			for _, a := range workerAnnotations(t, tokens) {
				assert.NotContains(t, sums, a[manifest.SpeculativeConfigChecksum], "another config, another checksum")
			}
			// The frontend reads no speculative config: it does not roll.
			assert.Equal(t, graphSpec(t, before).Components[0], graphSpec(t, after).Components[0])
		})
	}
}

func TestDerivedValuesFollowWhatTheyAreDerivedFrom(t *testing.T) {
	r := mustRun(t, "disagg", map[string]string{
		"minimax-m3:modelCache": `{"storageClass": "rwx-fast", "mountPath": "/models"}`,
		"minimax-m3:model":      `{"name": "acme/MiniMax-M3-FT", "revision": "` + newDraftRevision + `"}`,
	})
	spec := graphSpec(t, r)
	assert.Equal(t, []string{"--model-name", "acme/MiniMax-M3-FT", "--trust-remote-code"}, spec.Components[0].PodTemplate.Spec.Containers[0].Args[13:])
	for i, ws := range []string{"/models/flashinfer-workspaces/fi-23945310-sm100-d07-prefill-v2", "/models/flashinfer-workspaces/fi-23945310-sm100"} {
		wc := spec.Components[i+1].PodTemplate.Spec.Containers[0]
		assert.Equal(t, ws, envValue(t, wc.Env, "FLASHINFER_WORKSPACE_BASE"))
		assert.Equal(t, "/models", envValue(t, wc.Env, "HF_HOME"))
		assert.Equal(t, "acme/MiniMax-M3-FT", envValue(t, wc.Env, "MODEL_NAME"))
		assert.Equal(t, "acme/MiniMax-M3-FT", envValue(t, wc.Env, "SERVED_MODEL_NAME"))
		assert.Equal(t, "/models", wc.VolumeMounts[0].MountPath)
	}
	assert.Equal(t, "acme/MiniMax-M3-FT", r.outputs["servedModelName"])
	job := decode[corev1.PodSpec](t, r.one(t, "kubernetes:batch/v1:Job"), "spec", "template", "spec").Containers[0]
	assert.Equal(t, "/models", job.VolumeMounts[0].MountPath)
}

func TestEveryObjectCarriesTheStacksInstanceLabel(t *testing.T) {
	r := mustRun(t, "disagg", nil)
	n := 0
	for _, res := range r.resources {
		if !strings.HasPrefix(res.Type, "kubernetes:") || res.Type == "pulumi:providers:kubernetes" {
			continue
		}
		labels := decode[map[string]string](t, res, "metadata", "labels")
		assert.Equal(t, "disagg", labels["app.kubernetes.io/instance"], res.Type)
		assert.Equal(t, "pulumi", labels["app.kubernetes.io/managed-by"], res.Type)
		n++
	}
	assert.Equal(t, 10, n, "namespace, Secret, claim, Job, ComputeDomain, ConfigMap, graph, NetworkPolicy, a PodDisruptionBudget per worker role")
}

// Logical names never follow a setting, so renaming the graph moves only what it names.
func TestLogicalNamesAreStableAcrossAGraphRename(t *testing.T) {
	names := func(r *result) map[string]string {
		out := map[string]string{}
		for _, res := range r.resources {
			out[res.Type] += res.Name + " "
		}
		return out
	}
	before := mustRun(t, "agg", nil)
	after := mustRun(t, "agg", map[string]string{"minimax-m3:graphName": "mm3-prod"})
	assert.Equal(t, names(before), names(after))
	assert.Equal(t, "mm3-prod", decode[string](t, after.customResource(t, "DynamoGraphDeployment"), "metadata", "name"))
	assert.True(t, after.customResource(t, "DynamoGraphDeployment").RPC.GetDeleteBeforeReplace(),
		"a renamed graph frees its GPUs before the new one claims them")
}

// Stacks created when logical names followed graphName keep their objects: each resource aliases
// its old URN.
func TestResourcesAliasTheirFormerGraphDerivedNames(t *testing.T) {
	r := mustRun(t, "agg", nil)
	const g = "minimax-m3-agg-gb200-agentic"
	prefix := "urn:pulumi:agg::minimax-m3::minimax-m3:index:Deployment"
	want := map[string]string{
		"kubernetes:core/v1:PersistentVolumeClaim":            prefix + "$minimax-m3:index:ModelCache$kubernetes:core/v1:PersistentVolumeClaim::" + g + "-model-cache",
		"kubernetes:batch/v1:Job":                             prefix + "$minimax-m3:index:ModelCache$kubernetes:batch/v1:Job::" + g + "-model-cache-download",
		"kubernetes:core/v1:Namespace":                        prefix + "$minimax-m3:index:Namespace$kubernetes:core/v1:Namespace::" + g + "-namespace",
		"kubernetes:core/v1:Secret":                           prefix + "$minimax-m3:index:HFTokenSecret$kubernetes:core/v1:Secret::" + g + "-hf-token",
		"kubernetes:core/v1:ConfigMap":                        prefix + "$minimax-m3:index:DynamoGraph$kubernetes:core/v1:ConfigMap::" + g + "-graph-config",
		"kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment": prefix + "$minimax-m3:index:DynamoGraph$kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment::" + g + "-graph",
		"minimax-m3:index:Deployment":                         prefix + "::" + g,
	}
	for typ, urn := range want {
		var aliases []string
		for _, a := range r.one(t, typ).RPC.GetAliases() {
			aliases = append(aliases, a.GetUrn())
		}
		assert.Contains(t, aliases, urn, typ)
	}
}

func TestScalingAdapterHandsReplicasOver(t *testing.T) {
	r := mustRun(t, "disagg", map[string]string{"minimax-m3:decodeWorker": `{"scalingAdapter": true}`})
	spec := graphSpec(t, r)
	assert.Nil(t, spec.Components[1].ScalingAdapter)
	assert.Equal(t, &manifest.ScalingAdapter{}, spec.Components[2].ScalingAdapter)
	raw, err := json.Marshal(spec.Components[2].ScalingAdapter)
	require.NoError(t, err)
	assert.JSONEq(t, `{}`, string(raw), "v1beta1's scalingAdapter is an empty marker (v1alpha1's enabled is not in its schema)")
	assert.Equal(t, []string{"spec.components[2].replicas"}, r.customResource(t, "DynamoGraphDeployment").RPC.GetIgnoreChanges())
}

func TestRestartIsOmittedUntilAnIDIsSet(t *testing.T) {
	restart := map[string]string{"minimax-m3:restart": `{"id": "2026-12-02", "order": ["DecodeWorker", "PrefillWorker", "Frontend"]}`}
	_, err := run(t, "disagg", restart)
	require.Error(t, err, "the CRD rejects spec.restart on create")
	assert.Contains(t, err.Error(), "minimax-m3:restart.id: DynamoGraphDeployment inference/minimax-m3-disagg-gb200-agentic does not exist yet")

	own := map[string]string{"app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/part-of": "minimax-m3", "app.kubernetes.io/instance": "disagg"}
	r, err := runOn(t, fakeCluster{"dynamographdeployments/inference/minimax-m3-disagg-gb200-agentic": own}, "disagg", restart)
	require.NoError(t, err)
	assert.Equal(t, &manifest.GraphRestart{ID: "2026-12-02", Strategy: &manifest.GraphRestartStrategy{Order: []string{"DecodeWorker", "PrefillWorker", "Frontend"}}}, graphSpec(t, r).Restart)
	// `up` waits for the operator to take the new ID and finish the restart, not for the Ready the
	// graph already had before it.
	var waitFor []string
	require.NoError(t, json.Unmarshal([]byte(decode[map[string]string](t, r.customResource(t, "DynamoGraphDeployment"), "metadata", "annotations")["pulumi.com/waitFor"]), &waitFor))
	require.Len(t, waitFor, 2)
	assert.Equal(t, "condition=Ready", waitFor[0])
	// The provider evaluates jsonpath= as RFC 9535 JSONPath (github.com/theory/jsonpath, as in its
	// pkg/jsonpath): the restart is done once the operator took the ID and Completed it, or
	// Superseded it with a rollout (a worker change in the same update).
	path, value, ok := strings.Cut(strings.TrimPrefix(waitFor[1], "jsonpath="), "}=")
	require.True(t, ok, waitFor[1])
	expr, err := jsonpath.Parse("$" + strings.TrimPrefix(path, "{"))
	require.NoError(t, err)
	for status, done := range map[string]bool{
		`{"restart": {"observedID": "2026-12-02", "phase": "Completed"}}`:  true,
		`{"restart": {"observedID": "2026-12-02", "phase": "Superseded"}}`: true,
		`{"restart": {"observedID": "2026-12-02", "phase": "Restarting"}}`: false,
		`{"restart": {"observedID": "2026-12-01", "phase": "Completed"}}`:  false,
		`{"conditions": [{"type": "Ready", "status": "True"}]}`:            false,
		`{"restart": {"observedID": "2026-12-02"}, "state": "successful"}`: false,
	} {
		var obj map[string]any
		require.NoError(t, json.Unmarshal([]byte(`{"status": `+status+`}`), &obj))
		found := expr.Select(obj)
		assert.Equal(t, done, len(found) == 1 && found[0] == value, status)
	}

	_, err = runOn(t, fakeCluster{"dynamographdeployments/inference/minimax-m3-disagg-gb200-agentic": own}, "disagg",
		map[string]string{"minimax-m3:restart": `{"id": "a=b"}`})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `minimax-m3:restart.id: "a=b": use letters, digits`)
}

func TestPodTemplatePatchIsTheEscapeHatch(t *testing.T) {
	r := mustRun(t, "agg", map[string]string{"minimax-m3:worker": `{"podTemplatePatch": {"metadata": {"labels": {"team": "a"}},
	  "spec": {"enableServiceLinks": false, "containers": [{"name": "main", "env": [{"name": "NCCL_DEBUG", "value": "INFO"}]}],
	  "volumes": [{"name": "scratch", "emptyDir": {}}]}}}`})
	w := graphSpec(t, r).Components[1].PodTemplate
	assert.Equal(t, map[string]string{"team": "a"}, w.Labels)
	require.NotNil(t, w.Spec.EnableServiceLinks)
	assert.False(t, *w.Spec.EnableServiceLinks)
	require.Len(t, w.Spec.Containers, 1, "containers merge by name")
	assert.Equal(t, "INFO", envValue(t, w.Spec.Containers[0].Env, "NCCL_DEBUG"))
	assert.Equal(t, "nvidia/MiniMax-M3-NVFP4", envValue(t, w.Spec.Containers[0].Env, "MODEL_NAME"), "env merges by name")
	var volumes []string
	for _, v := range w.Spec.Volumes {
		volumes = append(volumes, v.Name)
	}
	assert.ElementsMatch(t, []string{"shared-model-cache", "scratch"}, volumes, "volumes merge by name")
}

func TestAFullKVTransferConfigReplacesTheTypedOne(t *testing.T) {
	const custom = `{"kv_connector":"NixlConnector","kv_role":"kv_both","kv_connector_extra_config":{"backends":["UCX"]}}`
	r := mustRun(t, "disagg", map[string]string{"minimax-m3:prefillWorker": `{"vllm": {"kvTransferConfig": ` + quote(custom) + `}}`})
	spec := graphSpec(t, r)
	assert.Equal(t, custom, envValue(t, spec.Components[1].PodTemplate.Spec.Containers[0].Env, "KV_TRANSFER_CONFIG"))
	assert.Equal(t, nixlKV, envValue(t, spec.Components[2].PodTemplate.Spec.Containers[0].Env, "KV_TRANSFER_CONFIG"))
}

func quote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

func TestUnknownKeysFailWithTheirName(t *testing.T) {
	r, err := run(t, "agg", map[string]string{"minimax-m3:workers.replicas": "2"})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "minimax-m3:workers.replicas: unknown key")
	assert.Empty(t, r.resources)
}

// An object the stack would create that already exists and is not the stack's stops the program
// before anything is registered, naming the object and the key to set.
func TestExistingObjectsOfOthersAreNeverTakenOverSilently(t *testing.T) {
	kustomized := map[string]string{"app.kubernetes.io/name": "minimax-m3-agg-gb200-agentic"}
	otherStack := map[string]string{"app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/part-of": "minimax-m3", "app.kubernetes.io/instance": "disagg"}
	cluster := fakeCluster{
		"namespaces//inference":                                         otherStack,
		"secrets/inference/hf-token-secret":                             otherStack,
		"persistentvolumeclaims/inference/shared-model-cache":           otherStack,
		"jobs/inference/minimax-m3-model-download":                      otherStack,
		"dynamographdeployments/inference/minimax-m3-agg-gb200-agentic": kustomized,
	}
	r, err := runOn(t, cluster, "agg", nil)
	require.Error(t, err)
	assert.Empty(t, r.resources)
	for key, text := range map[string]string{
		"namespace.create":           `Namespace inference already exists and belongs to stack "disagg": set namespace.create=false`,
		"huggingFace.existingSecret": "Secret inference/hf-token-secret already exists",
		"modelCache.create":          "PersistentVolumeClaim inference/shared-model-cache already exists and belongs to stack \"disagg\": set modelCache.create=false to use it",
		"modelDownload.enabled":      "Job inference/minimax-m3-model-download already exists and belongs to stack \"disagg\": set modelDownload.enabled=false",
		"graphName":                  "DynamoGraphDeployment inference/minimax-m3-agg-gb200-agentic already exists and was not created by this stack",
	} {
		assert.Contains(t, err.Error(), "minimax-m3:"+key+": "+text, key)
	}

	_, err = runOn(t, cluster, "agg", map[string]string{"minimax-m3:adopt": "true"})
	require.Error(t, err, "adopt never takes another stack's objects")
	assert.Contains(t, err.Error(), `minimax-m3:modelCache.create: PersistentVolumeClaim inference/shared-model-cache already exists and belongs to stack "disagg"`)
	assert.NotContains(t, err.Error(), "DynamoGraphDeployment", "adopt takes over the kustomize graph")

	_, err = runOn(t, fakeCluster{"dynamographdeployments/inference/minimax-m3-agg-gb200-agentic": kustomized}, "agg", map[string]string{"minimax-m3:adopt": "true"})
	assert.NoError(t, err, "adopt takes over objects no stack manages")
}

func TestTheStacksOwnObjectsAreItsOwn(t *testing.T) {
	own := map[string]string{"@minimax-m3.io/stack": "organization/minimax-m3/agg", "app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/instance": "agg"}
	// Objects an earlier version of the program wrote carry only its labels: the stack's instance
	// (the graph with the recipe's part-of), or no instance at all.
	labelled := map[string]string{"app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/part-of": "minimax-m3", "app.kubernetes.io/instance": "agg"}
	unlabelled := map[string]string{"app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/part-of": "minimax-m3"}
	graph := map[string]string{"app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/part-of": "dynamo", "app.kubernetes.io/instance": "agg"}
	_, err := runOn(t, fakeCluster{
		"namespaces//inference":                                         own,
		"secrets/inference/hf-token-secret":                             labelled,
		"persistentvolumeclaims/inference/shared-model-cache":           unlabelled,
		"dynamographdeployments/inference/minimax-m3-agg-gb200-agentic": graph,
	}, "agg", nil)
	assert.NoError(t, err)

	for what, live := range map[string]map[string]string{
		"applied with kubectl":                            {"app.kubernetes.io/part-of": "dynamo"},
		"another Pulumi program":                          {"app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/name": "minimax-m3-agg-gb200-agentic"},
		"another Pulumi program with the recipe's labels": {"app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/part-of": "dynamo"},
	} {
		_, err = runOn(t, fakeCluster{"dynamographdeployments/inference/minimax-m3-agg-gb200-agentic": live}, "agg", nil)
		require.Error(t, err, what)
		assert.Contains(t, err.Error(), "minimax-m3:graphName: DynamoGraphDeployment inference/minimax-m3-agg-gb200-agentic already exists and was not created by this stack", what)
	}
}

// Two stacks named agg, of other projects or organizations, label their objects alike; the
// identity annotation tells them apart.
func TestStacksOfTheSameNameInOtherProjectsAreOthers(t *testing.T) {
	for _, other := range []string{"organization/other-project/agg", "another-org/minimax-m3/agg"} {
		live := map[string]string{"@minimax-m3.io/stack": other, "app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/part-of": "minimax-m3", "app.kubernetes.io/instance": "agg"}
		r, err := runOn(t, fakeCluster{"persistentvolumeclaims/inference/shared-model-cache": live}, "agg", map[string]string{"minimax-m3:adopt": "true"})
		require.Error(t, err, other)
		assert.Contains(t, err.Error(), `minimax-m3:modelCache.create: PersistentVolumeClaim inference/shared-model-cache already exists and belongs to stack "`+other+`"`)
		assert.Empty(t, r.resources)
	}
	r := mustRun(t, "agg", nil)
	for _, res := range r.resources {
		if strings.HasPrefix(res.Type, "kubernetes:") && res.Type != "kubernetes:index:Provider" || res.Type == "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment" {
			assert.Equal(t, "organization/minimax-m3/agg", decode[map[string]string](t, res, "metadata", "annotations")["minimax-m3.io/stack"], res.Type)
		}
	}
	assert.Equal(t, "organization/minimax-m3/agg", r.outputs["stackIdentity"], "read back by the next update")
}

// After `pulumi stack rename`, the stack's last output names its objects' identity: they stay its
// own, and the next update writes the new identity.
func TestARenamedStackKeepsItsObjects(t *testing.T) {
	live := map[string]string{"@minimax-m3.io/stack": "organization/minimax-m3/agg-old", "app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/instance": "agg-old"}
	cluster := fakeCluster{"dynamographdeployments/inference/minimax-m3-agg-gb200-agentic": live}
	_, err := runOn(t, cluster, "agg", nil)
	require.Error(t, err, "without the stack's own record, the old name is another stack")
	r, err := runAfter(t, "organization/minimax-m3/agg-old", components.Options{Cluster: cluster}, "agg", nil)
	require.NoError(t, err)
	assert.Equal(t, "organization/minimax-m3/agg", decode[map[string]string](t, r.customResource(t, "DynamoGraphDeployment"), "metadata", "annotations")["minimax-m3.io/stack"])
}

// adopt=true takes the recipe's objects over for good: the first change of a field kubectl's
// client-side apply wrote would otherwise conflict with that field manager, so adopted objects
// apply with force; and what existed before the stack (the namespace with what it holds, the cache
// claim) is kept on destroy even with modelCache.deleteOnDestroy.
func TestAdoptedObjectsAreTakenOverAndKept(t *testing.T) {
	kubectlApplied := map[string]string{"app.kubernetes.io/part-of": "dynamo"}
	cluster := fakeCluster{
		"namespaces//inference":                                         {},
		"persistentvolumeclaims/inference/shared-model-cache":           {},
		"configmaps/inference/minimax-m3-agg-gb200-agentic-config":      kubectlApplied,
		"dynamographdeployments/inference/minimax-m3-agg-gb200-agentic": kubectlApplied,
	}
	deleteOnDestroy := map[string]string{"minimax-m3:adopt": "true", "minimax-m3:modelCache": `{"storageClass": "rwx-fast", "deleteOnDestroy": true}`}
	r, err := runOn(t, cluster, "agg", deleteOnDestroy)
	require.NoError(t, err)
	for _, res := range []recorded{r.customResource(t, "DynamoGraphDeployment"), r.one(t, "kubernetes:core/v1:ConfigMap"), r.one(t, "kubernetes:core/v1:Namespace"), r.one(t, "kubernetes:core/v1:PersistentVolumeClaim")} {
		annotations := decode[map[string]string](t, res, "metadata", "annotations")
		assert.Equal(t, "true", annotations["pulumi.com/patchForce"], res.Type)
		assert.Equal(t, "true", annotations["minimax-m3.io/adopted"], res.Type)
	}
	assert.True(t, r.one(t, "kubernetes:core/v1:Namespace").RPC.GetRetainOnDelete(), "an adopted namespace is kept, with what it holds")
	for k := range decode[map[string]string](t, r.one(t, "kubernetes:core/v1:Namespace"), "metadata", "labels") {
		assert.NotContains(t, k, "pod-security.kubernetes.io/", "an adopted namespace keeps its owner's Pod Security level: the forced apply would lower it")
	}
	assert.True(t, r.one(t, "kubernetes:core/v1:PersistentVolumeClaim").RPC.GetRetainOnDelete(), "an adopted claim is kept")
	_, hasForce := decode[map[string]string](t, r.one(t, "kubernetes:batch/v1:Job"), "metadata", "annotations")["pulumi.com/patchForce"]
	assert.False(t, hasForce, "what the stack creates applies without force")

	// Later updates know what was adopted from the mark, adopt set or not.
	adopted := map[string]string{"@minimax-m3.io/stack": "organization/minimax-m3/agg", "@minimax-m3.io/adopted": "true"}
	r, err = runOn(t, fakeCluster{"namespaces//inference": adopted}, "agg", map[string]string{"minimax-m3:modelCache": `{"storageClass": "rwx-fast", "deleteOnDestroy": true}`})
	require.NoError(t, err)
	assert.True(t, r.one(t, "kubernetes:core/v1:Namespace").RPC.GetRetainOnDelete())
	assert.NotContains(t, decode[map[string]string](t, r.one(t, "kubernetes:core/v1:Namespace"), "metadata", "labels"), "pod-security.kubernetes.io/enforce")
	assert.False(t, r.one(t, "kubernetes:core/v1:PersistentVolumeClaim").RPC.GetRetainOnDelete(), "a claim the stack created goes with deleteOnDestroy")
}

// The second stack on a namespace uses the first one's namespace, claim and download.
func TestASecondStackUsesTheFirstStacksCache(t *testing.T) {
	first := map[string]string{"app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/part-of": "minimax-m3", "app.kubernetes.io/instance": "agg"}
	r, err := runOn(t, fakeCluster{
		"namespaces//inference":                               first,
		"secrets/inference/hf-token-secret":                   first,
		"persistentvolumeclaims/inference/shared-model-cache": first,
		"jobs/inference/minimax-m3-model-download":            first,
	}, "disagg", map[string]string{
		"minimax-m3:namespace":     `{"name": "inference", "create": false}`,
		"minimax-m3:modelCache":    `{"create": false}`,
		"minimax-m3:modelDownload": `{"enabled": false}`,
		"minimax-m3:hfToken":       "",
	})
	require.NoError(t, err)
	for _, typ := range []string{"kubernetes:core/v1:Namespace", "kubernetes:core/v1:Secret", "kubernetes:core/v1:PersistentVolumeClaim", "kubernetes:batch/v1:Job"} {
		assert.Empty(t, r.byType(typ), "%s belongs to the first stack", typ)
	}
	assert.Equal(t, "shared-model-cache", graphSpec(t, r).Components[1].PodTemplate.Spec.Volumes[0].PersistentVolumeClaim.ClaimName)
}

// Preview warns when an update rolls a worker role whose rollout surges: the roll needs more GPUs
// than the stack has. A digest per component on the graph tells what rolls; scaling rolls nothing.
func TestPreviewWarnsOfRollsThatNeedASpareGPU(t *testing.T) {
	parse := func(overrides map[string]string) config.Config {
		raw := config.Raw{Values: map[string]string{"profile": "agg", "namespace": `{"name":"inference"}`, "modelCache": `{"storageClass":"rwx"}`,
			"huggingFace": `{"existingSecret":true}`}, Secrets: map[string]bool{}}
		for k, v := range overrides {
			raw.Values[k] = v
		}
		c, err := config.Parse(raw)
		require.NoError(t, err)
		return c
	}
	digests := func(c config.Config) map[string]string {
		d, err := manifest.TemplateDigests(&c, manifest.Decisions{})
		require.NoError(t, err)
		return d
	}
	recipeRollout := `{"rollout": {"strategy": "OperatorDefault"}`
	before := parse(map[string]string{"worker": recipeRollout + `}`})
	live := digests(before)

	flag := parse(map[string]string{"worker": recipeRollout + `, "vllm": {"maxNumSeqs": 48}}`})
	warnings := manifest.SurgingRolls(&flag, live, digests(flag))
	require.Len(t, warnings, 1)
	assert.Equal(t, "minimax-m3:worker.rollout: this update replaces Worker's pods, and its rollout starts 1 pod(s) (4 GPUs) beside its 3 before it stops one: "+
		"16 GPUs while it rolls, the stack has 12. On a full rack the new pod stays Pending for a GPU that never frees; "+
		"set minimax-m3:worker.rollout.strategy to RollingUpdate with maxSurge 0 (the default) to roll without a spare GPU", warnings[0])

	restart := parse(map[string]string{"worker": recipeRollout + `}`, "restart": `{"id": "r1"}`})
	assert.Len(t, manifest.SurgingRolls(&restart, live, digests(restart)), 1, "a restart rolls too")

	scaled := parse(map[string]string{"worker": recipeRollout + `, "replicas": 2}`})
	assert.Empty(t, manifest.SurgingRolls(&scaled, live, digests(scaled)), "scaling rolls nothing")
	assert.Empty(t, manifest.SurgingRolls(&before, live, digests(before)), "no change")
	assert.Empty(t, manifest.SurgingRolls(&flag, nil, digests(flag)), "no graph yet: a create")

	def := parse(map[string]string{"worker": `{"vllm": {"maxNumSeqs": 48}}`})
	assert.Empty(t, manifest.SurgingRolls(&def, live, digests(def)), "the default rollout needs no spare GPU")
}

// unreadableCluster is a cluster the credential cannot read (forbidden, unreachable).
type unreadableCluster struct{}

func (unreadableCluster) Read(context.Context, schema.GroupVersionResource, string, string) (components.LiveObject, bool, error) {
	return components.LiveObject{}, false, errors.New(`namespaces "inference" is forbidden: User "portal" cannot get resource "namespaces"`)
}

// A cluster that cannot be read skips the ownership check with a warning, unless
// kubernetes.requireRead (which the portal sets for every stack) refuses instead, before any
// resource is registered: on a cluster many teams share, nothing may be taken over unchecked.
func TestRequireReadRefusesWhatCannotBeChecked(t *testing.T) {
	r, err := runWith(t, components.Options{Cluster: unreadableCluster{}}, "agg", nil)
	require.NoError(t, err)
	assert.NotEmpty(t, r.resources)

	r, err = runWith(t, components.Options{Cluster: unreadableCluster{}}, "agg", map[string]string{"minimax-m3:kubernetes": `{"requireRead": true}`})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `minimax-m3:kubernetes.requireRead: the cluster cannot be read, so no check can say that nothing another stack, team or tool manages would be taken over: reading DynamoGraphDeployment inference/minimax-m3-agg-gb200-agentic: namespaces "inference" is forbidden`)
	if r != nil {
		assert.Empty(t, r.resources, "nothing registered")
	}
}
