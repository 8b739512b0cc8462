package unit

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/common/resource"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func nodeAffinity(key string, values ...string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: "In", Values: values}}}}}}}
}

// Site values land where the cluster starter's Components patched them.

const siteWorker = `{
  "scheduling": {
    "nodeSelector": {"pool": "gb200"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}],
    "requiredNodeLabels": {"pool": ["gb200"]},
    "schedulerName": "kai-scheduler", "runtimeClassName": "nvidia", "priorityClassName": "inference-high"
  },
  "network": {"socketInterface": "eth0", "rdmaResource": "rdma.example.com/device", "rdmaCount": "1"},
  "probes": {"startup": {"failureThreshold": 1560}, "liveness": {"periodSeconds": 5, "timeoutSeconds": 4, "failureThreshold": 120}},
  "extraEnv": [{"name": "SITE_TUNING", "value": "on"}],
  "extraArgs": ["--enable-log-requests"]
}`

func siteOverrides(stack string) map[string]string {
	o := map[string]string{
		"minimax-m3:imagePullSecrets": `["ngc-pull"]`,
		"minimax-m3:priorityClasses":  `["inference-high", "batch-low"]`,
		"minimax-m3:placement":        `{"topologyKey": "nvidia.com/gpu.clique"}`,
		"minimax-m3:modelCache":       `{"claimName": "mm3-weights", "storageClass": "rwx-fast"}`,
		"minimax-m3:frontend":         `{"scheduling": {"nodeSelector": {"pool": "cpu"}, "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "frontend", "effect": "NoSchedule"}], "requiredNodeLabels": {"pool": ["cpu"]}, "schedulerName": "kai-scheduler", "runtimeClassName": "runc", "priorityClassName": "inference-high"}}`,
		"minimax-m3:modelDownload":    `{"scheduling": {"nodeSelector": {"pool": "cpu-io"}, "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "io", "effect": "NoSchedule"}], "requiredNodeLabels": {"pool": ["cpu-io", "cpu-io-b"]}, "schedulerName": "batch-scheduler", "runtimeClassName": "runc", "priorityClassName": "batch-low"}}`,
	}
	if stack == "agg" {
		o["minimax-m3:worker"] = siteWorker
	} else {
		o["minimax-m3:prefillWorker"] = siteWorker
		o["minimax-m3:decodeWorker"] = siteWorker
	}
	return o
}

func TestSiteConfigLandsWhereTheStarterPutIt(t *testing.T) {
	for _, p := range profiles {
		t.Run(p.stack, func(t *testing.T) {
			r := mustRun(t, p.stack, siteOverrides(p.stack))
			spec := graphSpec(t, r)

			// registry-credentials: every pod, the download Job's too.
			for _, c := range spec.Components {
				assert.Equal(t, []corev1.LocalObjectReference{{Name: "ngc-pull"}}, c.PodTemplate.Spec.ImagePullSecrets, c.Name)
			}
			job := decode[corev1.PodSpec](t, r.one(t, "kubernetes:batch/v1:Job"), "spec", "template", "spec")
			assert.Equal(t, []corev1.LocalObjectReference{{Name: "ngc-pull"}}, job.ImagePullSecrets)
			// scheduling: the download Job's own policy, built like the graph's pods'.
			assert.Equal(t, map[string]string{"pool": "cpu-io"}, job.NodeSelector)
			assert.Equal(t, []corev1.Toleration{{Key: "dedicated", Operator: "Equal", Value: "io", Effect: "NoSchedule"}}, job.Tolerations)
			assert.Equal(t, nodeAffinity("pool", "cpu-io", "cpu-io-b"), job.Affinity)
			assert.Equal(t, "batch-scheduler", job.SchedulerName)
			assert.Equal(t, "runc", *job.RuntimeClassName)
			assert.Equal(t, "batch-low", job.PriorityClassName)

			// scheduling: the frontend's own policy.
			fe := spec.Components[0].PodTemplate.Spec
			assert.Equal(t, map[string]string{"pool": "cpu"}, fe.NodeSelector)
			assert.Equal(t, []corev1.Toleration{{Key: "dedicated", Operator: "Equal", Value: "frontend", Effect: "NoSchedule"}}, fe.Tolerations)
			assert.Equal(t, nodeAffinity("pool", "cpu"), fe.Affinity, "placement adds no pod affinity to the frontend")
			assert.Equal(t, "runc", *fe.RuntimeClassName)

			for _, c := range spec.Components[1:] {
				ps := c.PodTemplate.Spec
				// cache-binding: only the claim name changes; the volume and mount keep their names.
				assert.Equal(t, []corev1.Volume{cacheVolume("mm3-weights")}, ps.Volumes, c.Name)
				// scheduling
				assert.Equal(t, map[string]string{"pool": "gb200"}, ps.NodeSelector)
				assert.Equal(t, []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: "Equal", Value: "present", Effect: "NoSchedule"}}, ps.Tolerations)
				assert.Equal(t, "kai-scheduler", ps.SchedulerName)
				assert.Equal(t, "nvidia", *ps.RuntimeClassName)
				assert.Equal(t, "inference-high", ps.PriorityClassName)
				// placement: extends the scheduling affinity with the NVLink clique.
				require.NotNil(t, ps.Affinity)
				assert.Equal(t, nodeAffinity("pool", "gb200").NodeAffinity, ps.Affinity.NodeAffinity)
				assert.Equal(t, &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
					TopologyKey:    "nvidia.com/gpu.clique",
					MatchLabelKeys: []string{"nvidia.com/dynamo-graph-deployment-name"},
					LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
						Key: "nvidia.com/dynamo-component-type", Operator: "In", Values: []string{"worker", "prefill", "decode"}}}},
				}}}, ps.Affinity.PodAffinity)

				wc := ps.Containers[0]
				// network-interface: appended after the recipe's environment, then extra env.
				names := envNames(wc.Env)
				assert.Equal(t, []string{"NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "SITE_TUNING"}, names[len(names)-3:])
				assert.Equal(t, "eth0", envValue(t, wc.Env, "NCCL_SOCKET_IFNAME"))
				assert.Equal(t, "eth0", envValue(t, wc.Env, "GLOO_SOCKET_IFNAME"))
				assert.Equal(t, "1", resourcesOf(wc).Requests["rdma.example.com/device"])
				assert.Equal(t, "1", resourcesOf(wc).Limits["rdma.example.com/device"])
				// probes: a set probe replaces the operator's whole; unset fields keep its values.
				assert.Equal(t, &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/live", Port: intstr.FromString("system")}},
					PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 1560}, wc.StartupProbe)
				assert.Equal(t, &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/live", Port: intstr.FromString("system")}},
					PeriodSeconds: 5, TimeoutSeconds: 4, FailureThreshold: 120}, wc.LivenessProbe)
				assert.Nil(t, wc.ReadinessProbe)
				assert.Equal(t, "--enable-log-requests", wc.Args[len(wc.Args)-1])
			}
			assert.Equal(t, "mm3-weights", r.outputs["cacheClaimName"])
		})
	}
}

func TestGKERoCEPresetAddsInterfacesResourcesAndNCCLSettings(t *testing.T) {
	roce := `{"network": {"gkeRoce": {"defaultInterface": "eth0", "crossNic": "0", "networkResourceQuantity": "1",
	  "rdmaInterfaces": [{"interfaceName": "eth1", "network": "rdma-0"}, {"interfaceName": "eth2", "network": "rdma-1"}]}}}`
	r := mustRun(t, "disagg", map[string]string{"minimax-m3:prefillWorker": roce, "minimax-m3:decodeWorker": roce})
	for _, c := range graphSpec(t, r).Components[1:] {
		ann := c.PodTemplate.Annotations
		assert.Equal(t, "mp", ann["nvidia.com/vllm-distributed-executor-backend"], "the recipe's annotation stays")
		assert.Equal(t, "eth0", ann["networking.gke.io/default-interface"])
		var ifaces []map[string]string
		require.NoError(t, json.Unmarshal([]byte(ann["networking.gke.io/interfaces"]), &ifaces))
		assert.Equal(t, []map[string]string{
			{"interfaceName": "eth0", "network": "default"},
			{"interfaceName": "eth1", "network": "rdma-0"},
			{"interfaceName": "eth2", "network": "rdma-1"},
		}, ifaces)
		wc := c.PodTemplate.Spec.Containers[0]
		for _, res := range []string{"networking.gke.io.networks/rdma-0", "networking.gke.io.networks/rdma-0.IP", "networking.gke.io.networks/rdma-1", "networking.gke.io.networks/rdma-1.IP"} {
			assert.Equal(t, "1", resourcesOf(wc).Requests[res], res)
			assert.Equal(t, "1", resourcesOf(wc).Limits[res], res)
		}
		assert.Equal(t, "eth0", envValue(t, wc.Env, "NCCL_SOCKET_IFNAME"))
		assert.Equal(t, "eth0", envValue(t, wc.Env, "GLOO_SOCKET_IFNAME"))
		assert.Equal(t, "0", envValue(t, wc.Env, "NCCL_CROSS_NIC"))
	}
}

func TestDisaggWorkersShareOneComputeDomain(t *testing.T) {
	r := mustRun(t, "disagg", nil)
	require.Len(t, r.byType("kubernetes:resource.nvidia.com/v1beta1:ComputeDomain"), 1)
	spec := graphSpec(t, r)
	for _, c := range spec.Components[1:] {
		assert.Equal(t, "minimax-m3-disagg-gb200-agentic-cd-channel", *c.PodTemplate.Spec.ResourceClaims[0].ResourceClaimTemplateName, c.Name)
		assert.Equal(t, []string{"compute-domain-channel"}, resourcesOf(c.PodTemplate.Spec.Containers[0]).Claims)
	}
}

func TestExistingChannelClaimTemplateIsReused(t *testing.T) {
	r := mustRun(t, "disagg", map[string]string{"minimax-m3:computeDomain": `{"create": false, "channelClaimTemplate": "rack-7-channel"}`})
	assert.Empty(t, r.byType("kubernetes:resource.nvidia.com/v1beta1:ComputeDomain"))
	for _, c := range graphSpec(t, r).Components[1:] {
		assert.Equal(t, "rack-7-channel", *c.PodTemplate.Spec.ResourceClaims[0].ResourceClaimTemplateName)
	}
}

func TestSyntheticAcceptanceChangesOnlyTheWorkersConfigMapKey(t *testing.T) {
	for _, p := range profiles {
		t.Run(p.stack, func(t *testing.T) {
			real := mustRun(t, p.stack, nil)
			synthetic := mustRun(t, p.stack, map[string]string{"minimax-m3:speculativeDecoding": `{"mode": "synthetic"}`})
			require.Equal(t, sortedTypes(real), sortedTypes(synthetic))

			for _, a := range real.resources {
				if strings.HasSuffix(a.Type, ":DynamoGraphDeployment") {
					continue
				}
				b := synthetic.named(t, a.Type, a.Name)
				assert.True(t, reflect.DeepEqual(plain(t, a.Inputs), plain(t, b.Inputs)), "%s %s changed", a.Type, a.Name)
			}
			want := graphSpec(t, real)
			for _, c := range want.Components[1:] {
				c.PodTemplate.Spec.Containers[0].Env[1].ValueFrom.ConfigMapKeyRef.Key = "speculative-config-synthetic"
			}
			assert.Equal(t, want, graphSpec(t, synthetic))
			assert.Equal(t, "synthetic", synthetic.outputs["speculativeMode"])
		})
	}
}

func TestExistingNamespaceAndSecretAreAdopted(t *testing.T) {
	r := mustRun(t, "agg", map[string]string{
		"minimax-m3:namespace":   `{"name": "team-a", "create": false}`,
		"minimax-m3:hfToken":     "",
		"minimax-m3:huggingFace": `{"secretName": "team-a-hf", "existingSecret": true}`,
	})
	assert.Empty(t, r.byType("kubernetes:core/v1:Namespace"))
	assert.Empty(t, r.byType("kubernetes:core/v1:Secret"))
	c := decode[corev1.PodSpec](t, r.one(t, "kubernetes:batch/v1:Job"), "spec", "template", "spec").Containers[0]
	assert.Equal(t, []corev1.EnvFromSource{secretEnv("team-a-hf")}, c.EnvFrom)
	assert.Equal(t, "team-a", decode[string](t, r.customResource(t, "DynamoGraphDeployment"), "metadata", "namespace"))
}

func TestExistingCacheWithoutDownloadCreatesNoClaimJobOrSecret(t *testing.T) {
	r := mustRun(t, "agg", map[string]string{
		"minimax-m3:modelCache":    `{"claimName": "populated-cache", "create": false}`,
		"minimax-m3:modelDownload": `{"enabled": false}`,
		"minimax-m3:hfToken":       "",
	})
	assert.Empty(t, r.byType("kubernetes:core/v1:PersistentVolumeClaim"))
	assert.Empty(t, r.byType("kubernetes:batch/v1:Job"))
	assert.Empty(t, r.byType("kubernetes:core/v1:Secret"))
	assert.Equal(t, "populated-cache", graphSpec(t, r).Components[1].PodTemplate.Spec.Volumes[0].PersistentVolumeClaim.ClaimName)
}

func TestReadinessWaitIsAnAnnotationAndCanBeTurnedOff(t *testing.T) {
	dgd := mustRun(t, "agg", nil).customResource(t, "DynamoGraphDeployment")
	annotations := decode[map[string]string](t, dgd, "metadata", "annotations")
	assert.Equal(t, "condition=Ready", annotations["pulumi.com/waitFor"])
	assert.NotContains(t, annotations, "pulumi.com/skipAwait")
	dgd = mustRun(t, "agg", map[string]string{"minimax-m3:readiness": `{"waitForReady": false}`}).customResource(t, "DynamoGraphDeployment")
	annotations = decode[map[string]string](t, dgd, "metadata", "annotations")
	assert.Equal(t, "true", annotations["pulumi.com/skipAwait"])
	assert.NotContains(t, annotations, "pulumi.com/waitFor")
}

// A download not waited for is not awaited on its deletion either (the provider's skipAwait for
// Jobs), so it is deleted in the background: the Job object is gone when a replacement is applied.
// A waited-for download keeps the foreground deletion, which waits for its pods.
func TestADownloadNotWaitedForIsDeletedInTheBackground(t *testing.T) {
	job := mustRun(t, "agg", nil).byType("kubernetes:batch/v1:Job")[0]
	annotations := decode[map[string]string](t, job, "metadata", "annotations")
	assert.NotContains(t, annotations, "pulumi.com/skipAwait")
	assert.NotContains(t, annotations, "pulumi.com/deletionPropagationPolicy")
	job = mustRun(t, "agg", map[string]string{"minimax-m3:modelDownload": `{"waitForCompletion": false}`}).byType("kubernetes:batch/v1:Job")[0]
	annotations = decode[map[string]string](t, job, "metadata", "annotations")
	assert.Equal(t, "true", annotations["pulumi.com/skipAwait"])
	assert.Equal(t, "background", annotations["pulumi.com/deletionPropagationPolicy"])
}

func TestNoResourceInputCarriesTheTokenInPlainText(t *testing.T) {
	for _, p := range profiles {
		t.Run(p.stack, func(t *testing.T) {
			r := mustRun(t, p.stack, siteOverrides(p.stack))
			found := false
			for _, res := range r.resources {
				walkPlain(resource.NewObjectProperty(res.Inputs), func(s string) {
					if strings.Contains(s, testToken) {
						t.Errorf("%s %s carries the token outside a secret", res.Type, res.Name)
					}
				})
				found = found || res.Inputs.ContainsSecrets()
			}
			assert.True(t, found, "the token Secret is a secret input")
		})
	}
}

// walkPlain visits every string that is not inside a secret.
func walkPlain(v resource.PropertyValue, visit func(string)) {
	switch {
	case v.IsSecret():
	case v.IsString():
		visit(v.StringValue())
	case v.IsObject():
		for _, e := range v.ObjectValue() {
			walkPlain(e, visit)
		}
	case v.IsArray():
		for _, e := range v.ArrayValue() {
			walkPlain(e, visit)
		}
	}
}

func TestBadConfigRegistersNoResource(t *testing.T) {
	r, err := run(t, "agg", map[string]string{"minimax-m3:worker": `{"tensorParallelSize": 3}`})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "minimax-m3:worker.tensorParallelSize")
	assert.Empty(t, r.resources)
}
