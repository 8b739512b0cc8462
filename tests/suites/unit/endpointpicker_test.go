package unit

import (
	"context"
	"encoding/json"
	"maps"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"minimax-m3/components"
	"minimax-m3/config"
	"minimax-m3/manifest"
	"minimax-m3/policy"
)

const pickerImage = "nvcr.io/nvidia/ai-dynamo/dynamo-frontend:1.4.0"

// poolOn routes the site's Gateway to the graph's InferencePool, with the picker's image.
func poolOn(fields map[string]string) map[string]string {
	all := map[string]string{"backend": `"inferencePool"`, "endpointPicker": `{"image": "` + pickerImage + `"}`}
	for k, v := range fields {
		all[k] = v
	}
	return exposureOn(all)
}

// graphComponent finds a graph component by name.
func graphComponent(t *testing.T, spec manifest.DynamoGraphDeploymentSpec, name string) manifest.GraphComponent {
	t.Helper()
	for _, c := range spec.Components {
		if c.Name == name {
			return c
		}
	}
	require.FailNow(t, "no component "+name)
	return manifest.GraphComponent{}
}

func TestExposureToAnInferencePoolAddsThePickerAndTheWorkersSidecars(t *testing.T) {
	r := mustRun(t, "disagg", poolOn(nil))
	spec := graphSpec(t, r)
	require.Len(t, spec.Components, 4, "Frontend, PrefillWorker, DecodeWorker, then the picker")
	assert.Equal(t, "Frontend", spec.Components[0].Name, "the frontend stays: the smoke test and in-cluster clients use its Service")

	epp := spec.Components[3]
	assert.Equal(t, []any{manifest.EndpointPickerName, "epp", 1}, []any{epp.Name, epp.Type, epp.Replicas})
	main := epp.PodTemplate.Spec.Containers[0]
	assert.Equal(t, []any{"main", pickerImage}, []any{main.Name, main.Image})
	d := config.Defaults(config.Disaggregated)
	assert.Equal(t, d.ServedModelName(), envValue(t, main.Env, "DYN_MODEL_NAME"), "the served model")
	assert.Equal(t, "true", envValue(t, main.Env, "DYN_ENFORCE_DISAGG"), "disagg: every request through prefill")
	assert.Equal(t, strconv.Itoa(d.Frontend.Router.KVCacheBlockSize), envValue(t, main.Env, "DYN_KV_CACHE_BLOCK_SIZE"), "the router's block size")
	var token corev1.EnvVar
	for _, e := range main.Env {
		if e.Name == "HF_TOKEN" {
			token = e
		}
	}
	require.NotNil(t, token.ValueFrom, "HF_TOKEN")
	require.NotNil(t, token.ValueFrom.SecretKeyRef, "from the token Secret, by reference")
	assert.Equal(t, "1", envValue(t, main.Env, "HF_HUB_OFFLINE"), "the frontend's environment: off the hub")
	assert.Equal(t, d.ModelCache.MountPath, envValue(t, main.Env, "HF_HOME"))
	require.Len(t, main.VolumeMounts, 1)
	assert.True(t, main.VolumeMounts[0].ReadOnly, "the model cache, read-only")
	assert.Equal(t, d.ModelCache.ClaimName, epp.PodTemplate.Spec.Volumes[0].PersistentVolumeClaim.ClaimName)
	assert.Equal(t, "hf-token-secret", token.ValueFrom.SecretKeyRef.Name)
	front := spec.Components[0].PodTemplate.Spec
	assert.Equal(t, []any{front.NodeSelector, front.Tolerations, front.Affinity}, []any{epp.PodTemplate.Spec.NodeSelector, epp.PodTemplate.Spec.Tolerations, epp.PodTemplate.Spec.Affinity},
		"where the frontend runs (frontend.scheduling)")

	require.NotNil(t, epp.EPPConfig)
	cfg := epp.EPPConfig.Config
	var profiles []string
	for _, p := range cfg.SchedulingProfiles {
		var refs []string
		for _, pl := range p.Plugins {
			refs = append(refs, pl.PluginRef)
			assert.Equal(t, 1, *pl.Weight)
		}
		profiles = append(profiles, p.Name+":"+strings.Join(refs, ","))
	}
	assert.Equal(t, []string{"prefill:prefill-filter,dyn-prefill,picker", "decode:decode-filter,dyn-decode,picker"}, profiles)
	filters := map[string]map[string]any{}
	for _, p := range cfg.Plugins {
		if p.Type == "label-filter" {
			var params map[string]any
			require.NoError(t, json.Unmarshal(p.Parameters, &params))
			filters[p.Name] = params
		}
	}
	assert.Equal(t, map[string]any{"label": "nvidia.com/dynamo-component-type", "validValues": []any{"prefill"}, "allowsNoLabel": false}, filters["prefill-filter"])
	assert.Equal(t, []any{"decode"}, filters["decode-filter"]["validValues"])
	// Plugins without parameters are sent without them, not as null (which the API server would
	// keep, and a preview would see as a change).
	raw, err := json.Marshal(plain(t, r.customResource(t, "DynamoGraphDeployment").Inputs))
	require.NoError(t, err)
	assert.NotContains(t, string(raw), `"parameters":null`)

	for _, name := range []string{"PrefillWorker", "DecodeWorker"} {
		w := graphComponent(t, spec, name)
		require.NotNil(t, w.FrontendSidecar, name)
		assert.Equal(t, manifest.FrontendSidecarName, *w.FrontendSidecar)
		require.Len(t, w.PodTemplate.Spec.Containers, 2, name)
		sidecar := w.PodTemplate.Spec.Containers[1]
		assert.Equal(t, manifest.FrontendSidecarName, sidecar.Name)
		assert.Equal(t, []string{"-m", "dynamo.frontend", "--router-mode", "direct"}, sidecar.Args, "the picker has chosen the worker")
		assert.Equal(t, w.PodTemplate.Spec.Containers[0].Image, sidecar.Image, "the runtime image")
		assert.Equal(t, d.ModelCache.MountPath, envValue(t, sidecar.Env, "HF_HOME"), "the tokenizer from the cache")
		assert.Equal(t, "1", envValue(t, sidecar.Env, "HF_HUB_OFFLINE"), "the frontend's environment")
		assert.Equal(t, "4Gi", sidecar.Resources.Requests.Memory().String(), "exposure.frontendSidecar.resources")
	}

	route := decode[gatewayv1.HTTPRouteSpec](t, r.one(t, httpRouteType), "spec").Rules[0].BackendRefs[0]
	assert.Equal(t, []string{"inference.networking.k8s.io", "InferencePool", "minimax-m3-disagg-gb200-agentic-pool"},
		[]string{string(*route.Group), string(*route.Kind), string(route.Name)}, "the pool the operator makes for the picker")
	assert.Equal(t, gatewayv1.PortNumber(8000), *route.Port, "the sidecars' port")
	assert.Empty(t, policy.Check(plan(t, "disagg", poolOn(nil))), "the program's graph and route pass the policies")

	agg := graphSpec(t, mustRun(t, "agg", poolOn(nil)))
	aggEPP := graphComponent(t, agg, manifest.EndpointPickerName)
	assert.Equal(t, "false", envValue(t, aggEPP.PodTemplate.Spec.Containers[0].Env, "DYN_ENFORCE_DISAGG"))
	require.Len(t, aggEPP.EPPConfig.Config.SchedulingProfiles, 1)
	assert.Equal(t, "decode", aggEPP.EPPConfig.Config.SchedulingProfiles[0].Name)
	for _, p := range aggEPP.EPPConfig.Config.Plugins {
		if p.Type == "label-filter" {
			assert.JSONEq(t, `{"label": "nvidia.com/dynamo-component-type", "validValues": ["worker"], "allowsNoLabel": false}`, string(p.Parameters), "agg's workers are typed worker")
		}
	}
	assert.Equal(t, manifest.FrontendSidecarName, *graphComponent(t, agg, "Worker").FrontendSidecar)
}

func TestExposureToTheFrontendLeavesTheGraphAsItIs(t *testing.T) {
	for _, stack := range []string{"agg", "disagg"} {
		off := graphSpec(t, mustRun(t, stack, nil))
		on := graphSpec(t, mustRun(t, stack, exposureOn(map[string]string{"backend": `"frontend"`, "endpointPicker": `{"image": "` + pickerImage + `"}`})))
		assert.Equal(t, off, on, "%s: the route to the frontend changes no component", stack)
		for _, c := range on.Components {
			assert.Nil(t, c.FrontendSidecar, stack)
			assert.Len(t, c.PodTemplate.Spec.Containers, 1, stack)
		}
	}
}

func TestInferencePoolThatCannotWorkNamesItsKey(t *testing.T) {
	for key, overrides := range map[string]map[string]string{
		"exposure.backend":               exposureOn(map[string]string{"backend": `"service-mesh"`}),
		"exposure.endpointPicker.image":  exposureOn(map[string]string{"backend": `"inferencePool"`}),
		"exposure.endpointPicker.image ": poolOn(map[string]string{"endpointPicker": `{"image": "ghcr.io/someone/epp:1"}`}),
		"exposure.endpointPicker.resources.requests.memory": poolOn(map[string]string{"endpointPicker": `{"image": "` + pickerImage +
			`", "resources": {"requests": {"memory": "8Gi"}, "limits": {"memory": "1Gi"}}}`}),
	} {
		_, err := run(t, "agg", overrides)
		require.Error(t, err, key)
		assert.Contains(t, err.Error(), "minimax-m3:"+strings.TrimSpace(key)+":", key)
	}
}

// poolessCluster serves Gateway API but not the Inference Extension.
type poolessCluster struct{ routedCluster }

func (c poolessCluster) Served(_ context.Context, gvr schema.GroupVersionResource) (bool, error) {
	return gvr.Group != manifest.InferencePools.Group, nil
}

func TestInferencePoolOnAClusterWithoutTheInferenceExtensionIsRefusedBeforeAnythingIsCreated(t *testing.T) {
	r, err := runWith(t, components.Options{Cluster: poolessCluster{}}, "agg", poolOn(nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "minimax-m3:exposure.backend: the cluster does not serve inferencepools (inference.networking.k8s.io/v1): install the Gateway API Inference Extension's CRDs")
	assert.Empty(t, r.resources, "nothing is registered")
	_, err = runWith(t, components.Options{Cluster: poolessCluster{}}, "agg", exposureOn(nil))
	assert.NoError(t, err, "a route to the frontend needs no pool")
}

func TestObservabilityScrapesTheSidecarsThePoolRoutesTo(t *testing.T) {
	overrides := poolOn(nil)
	overrides["minimax-m3:observability"] = `{"enabled": true}`
	r := mustRun(t, "agg", overrides)
	graph := "minimax-m3-agg-gb200-agentic"
	monitors := map[string]monitoringv1.PodMonitorSpec{}
	for _, m := range r.byType(podMonitorType) {
		monitors[decode[string](t, m, "metadata", "name")] = decode[monitoringv1.PodMonitorSpec](t, m, "spec")
	}
	require.Len(t, monitors, 3)
	sidecars := monitors[graph+"-sidecars"]
	assert.Equal(t, monitors[graph+"-workers"].Selector, sidecars.Selector, "the worker pods")
	assert.Equal(t, "http", *sidecars.PodMetricsEndpoints[0].Port, "the sidecar's port, where its request metrics are")

	var rule monitoringv1.PrometheusRuleSpec
	for _, p := range r.byType("kubernetes:monitoring.coreos.com/v1:PrometheusRule") {
		rule = decode[monitoringv1.PrometheusRuleSpec](t, p, "spec")
	}
	for _, a := range rule.Groups[0].Rules {
		if a.Alert == components.AlertTimeToFirstToken {
			assert.Contains(t, a.Expr.StrVal, `job=~"inference/minimax-m3-agg-gb200-agentic-frontend|inference/minimax-m3-agg-gb200-agentic-sidecars"`)
		}
		if a.Alert == components.AlertFrontendDown {
			assert.NotContains(t, a.Expr.StrVal, "sidecars", "the frontend component's own targets")
		}
	}
}

func TestPolicyRoutesOwnBackendsKnowsTheInferencePool(t *testing.T) {
	for name, edit := range map[string]func(ref map[string]any){
		"another group's Service":    func(ref map[string]any) { ref["group"] = "evil.example.com"; ref["kind"] = "Service" },
		"an InferencePool elsewhere": func(ref map[string]any) { ref["namespace"] = "team-b" },
		"a pool of no group":         func(ref map[string]any) { delete(ref, "group") },
	} {
		p := plan(t, "agg", poolOn(nil))
		route := step(t, p, "HTTPRoute")
		ref := route.New["spec"].(map[string]any)["rules"].([]any)[0].(map[string]any)["backendRefs"].([]any)[0].(map[string]any)
		edit(ref)
		assert.Equal(t, []string{"routes-own-backends"}, rules(policy.Check(p)), name)
	}
}

// The picker runs as the operator's ServiceAccount for it: the pod security check reads what the
// program writes, which names none.
func TestThePickersPodTemplatePassesPodSecurity(t *testing.T) {
	epp := graphComponent(t, graphSpec(t, mustRun(t, "agg", poolOn(nil))), manifest.EndpointPickerName)
	assert.Empty(t, epp.PodTemplate.Spec.ServiceAccountName)
	assert.Equal(t, corev1.PullIfNotPresent, epp.PodTemplate.Spec.Containers[0].ImagePullPolicy)
}

// A live graph's components are fixed (the operator's webhook refuses adding or removing one): the
// route cannot move between the frontend and an InferencePool on it, and a stack whose graph has
// its picker keeps updating.
func TestTheRouteCannotMoveToOrFromAPoolOnALiveGraph(t *testing.T) {
	own := map[string]string{"app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/part-of": "minimax-m3", "app.kubernetes.io/instance": "agg",
		"@minimax-m3.io/template-sha256.Frontend": "x", "@minimax-m3.io/template-sha256.Worker": "x"}
	graph := "dynamographdeployments/inference/minimax-m3-agg-gb200-agentic"
	_, err := runOn(t, fakeCluster{graph: own}, "agg", poolOn(nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "minimax-m3:exposure.backend: the live DynamoGraphDeployment inference/minimax-m3-agg-gb200-agentic has no endpoint picker (component Epp)")
	assert.Contains(t, err.Error(), "choose another graphName")
	assert.NotContains(t, err.Error(), "minimax-m3:profile:")

	withPicker := maps.Clone(own)
	withPicker["@minimax-m3.io/template-sha256.Epp"] = "x"
	_, err = runOn(t, fakeCluster{graph: withPicker}, "agg", poolOn(nil))
	require.NoError(t, err, "the picker's graph updates")
	_, err = runOn(t, fakeCluster{graph: withPicker}, "agg", exposureOn(nil))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "minimax-m3:exposure.backend: the live DynamoGraphDeployment inference/minimax-m3-agg-gb200-agentic has an endpoint picker (component Epp)")
	// Turning exposure off would take the picker away too: said at the key the user changed.
	_, err = runOn(t, fakeCluster{graph: withPicker}, "agg", nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "minimax-m3:exposure.enabled: the live DynamoGraphDeployment inference/minimax-m3-agg-gb200-agentic has an endpoint picker (component Epp), which turning exposure off removes")
}
