package unit

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"minimax-m3/config"
	"minimax-m3/manifest"
)

// The expected values below are the upstream recipe's (recipes/minimax-m3), written out by hand.

const (
	image         = "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.6.0-minimax-m3-dev.1"
	modelRevision = "901464083161bf8612a29ff7ad29914cd4ab4a85"
	draftRevision = "96692486b5fd38ebf8fd2a5f6bb53427d30819a8"
	attention     = `{"backend":"FLASHINFER","use_trtllm_attention":true,"indexer_kv_dtype":"fp8","minimax_m3_msa_decode_backend":"cutlass"}`
	kvEvents      = `{"enable_kv_cache_events":true,"publisher":"zmq"}`
	compile8K     = `{"cudagraph_mode":"FULL_AND_PIECEWISE","max_cudagraph_capture_size":8192,"cudagraph_capture_sizes":[1,2,4,8,12,16,20,24,32,48,64,96,128,192,256,512,1024,1536,2048,2560,3072,4096,6144,8192]}`
	compile16K    = `{"cudagraph_mode":"FULL_AND_PIECEWISE","max_cudagraph_capture_size":16384,"cudagraph_capture_sizes":[1,2,4,8,12,16,20,24,32,48,64,96,128,192,256,512,1024,1536,2048,2560,3072,4096,6144,8192,12288,14336,16384]}`
	offloadKV     = `{"kv_connector":"OffloadingConnector","kv_role":"kv_both","kv_load_failure_policy":"recompute","kv_connector_extra_config":{"spec_name":"CPUOffloadingSpec","cpu_bytes_to_use":400000000000,"block_size":128,"store_threshold":2,"self_describing_kv_events":true}}`
	nixlKV        = `{"kv_connector":"NixlConnector","kv_role":"kv_both"}`
)

type workerExpectation struct {
	name, typ        string
	sharedMemory     string
	memoryLimit      string
	grace            *int64
	args             []string
	envAfterHFHome   []corev1.EnvVar
	kvTransferConfig string
}

type profileExpectation struct {
	stack, graph string
	frontendArgs []string
	workers      []workerExpectation
	gpus         int
}

// workerArgs is a worker's argument list exactly as the recipe writes it for a role.
func workerArgs(role, gpuUtil, seqs, batched, compile string) []string {
	args := []string{"-m", "dynamo.vllm"}
	if role == "prefill" {
		args = append(args, "--router-mode", "kv", "--no-router-track-output-blocks")
	}
	args = append(args, "--model", "$(MODEL_NAME)", "--revision", modelRevision, "--served-model-name", "$(SERVED_MODEL_NAME)", "--trust-remote-code")
	multimodal := []string{"--enable-multimodal", "--frontend-decoding", "--mm-encoder-tp-mode", "data", "--skip-mm-profiling"}
	scheduler := []string{"--tensor-parallel-size", "4", "--block-size", "128", "--gpu-memory-utilization", gpuUtil,
		"--max-model-len", "1048576", "--max-num-seqs", seqs, "--max-num-batched-tokens", batched,
		"--enable-prefix-caching", "--kv-cache-metrics", "--kv-cache-dtype", "fp8"}
	if role == "worker" {
		args = append(append(args, multimodal...), scheduler...)
	} else {
		args = append(append(append(args, scheduler...), multimodal...), "--enable-cumem-allocator")
	}
	args = append(args, "--no-enable-flashinfer-autotune", "--enable-bf16x3-router-gemm",
		"--attention-config", attention, "--compilation-config", compile, "--speculative-config", "$(SPECULATIVE_CONFIG)")
	if role != "worker" {
		args = append(args, "--disaggregation-mode", role)
	}
	args = append(args, "--kv-transfer-config", "$(KV_TRANSFER_CONFIG)")
	parsers := []string{"--dyn-tool-call-parser", "minimax_m3", "--dyn-reasoning-parser", "minimax_m3", "--reasoning-parser", "minimax_m3"}
	events := []string{"--kv-events-config", kvEvents}
	if role == "decode" {
		return append(append(args, events...), parsers...)
	}
	return append(append(args, parsers...), events...)
}

func env(pairs ...string) []corev1.EnvVar {
	var out []corev1.EnvVar
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, corev1.EnvVar{Name: pairs[i], Value: pairs[i+1]})
	}
	return out
}

func disaggEnv(workspace string) []corev1.EnvVar {
	return env("FLASHINFER_WORKSPACE_BASE", workspace,
		"HF_HUB_OFFLINE", "1", "TRANSFORMERS_OFFLINE", "1", "VLLM_ENGINE_READY_TIMEOUT_S", "14400",
		"VLLM_FLOAT32_MATMUL_PRECISION", "high", "VLLM_FLASHINFER_ALLREDUCE_BACKEND", "mnnvl",
		"VLLM_USE_NCCL_SYMM_MEM", "0", "NCCL_MNNVL_ENABLE", "1", "NCCL_CUMEM_ENABLE", "1",
		"NCCL_NVLS_ENABLE", "1", "NCCL_P2P_LEVEL", "NVL", "UCX_TLS", "cuda_copy,cuda_ipc,tcp",
		"UCX_CUDA_IPC_ENABLE_MNNVL", "y", "ETCD_LEASE_TTL", "120", "VLLM_RPC_TIMEOUT", "600000",
		"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "1800", "VLLM_CONNECTOR_PREFETCH_DEPTH", "8",
		"VLLM_CONNECTOR_PREFETCH_KV_CAP", "0.65")
}

var grace60 = int64(60)

var profiles = []profileExpectation{
	{
		stack: "agg", graph: "minimax-m3-agg-gb200-agentic", gpus: 12,
		frontendArgs: []string{"-m", "dynamo.frontend", "--router-mode", "kv", "--router-kv-events",
			"--http-host", "0.0.0.0", "--http-port", "8000", "--kv-cache-block-size", "128"},
		workers: []workerExpectation{{
			name: "Worker", typ: "worker", sharedMemory: "448Gi", memoryLimit: "640Gi",
			args:             workerArgs("worker", "0.9", "256", "16384", compile8K),
			kvTransferConfig: offloadKV,
			envAfterHFHome: env("HF_MODULES_CACHE", "/tmp/hf_modules", "PYTHONHASHSEED", "0",
				"HF_HUB_OFFLINE", "1", "TRANSFORMERS_OFFLINE", "1", "VLLM_ENGINE_READY_TIMEOUT_S", "14400",
				"VLLM_FLOAT32_MATMUL_PRECISION", "high", "VLLM_FLASHINFER_ALLREDUCE_BACKEND", "mnnvl",
				"NCCL_MNNVL_ENABLE", "1", "NCCL_CUMEM_ENABLE", "1"),
		}},
	},
	{
		stack: "disagg", graph: "minimax-m3-disagg-gb200-agentic", gpus: 24,
		frontendArgs: []string{"-m", "dynamo.frontend", "--router-mode", "kv", "--router-kv-events",
			"--router-track-active-blocks", "--router-track-output-blocks", "--http-host", "0.0.0.0",
			"--http-port", "8000", "--kv-cache-block-size", "128", "--model-name", "nvidia/MiniMax-M3-NVFP4",
			"--trust-remote-code"},
		workers: []workerExpectation{
			{
				name: "PrefillWorker", typ: "prefill", sharedMemory: "64Gi", memoryLimit: "512Gi", grace: &grace60,
				args:             workerArgs("prefill", "0.8", "32", "24576", compile16K),
				kvTransferConfig: nixlKV,
				envAfterHFHome:   disaggEnv("/shared-model-cache/flashinfer-workspaces/fi-23945310-sm100-d07-prefill-v2"),
			},
			{
				name: "DecodeWorker", typ: "decode", sharedMemory: "64Gi", memoryLimit: "512Gi", grace: &grace60,
				args:             workerArgs("decode", "0.9", "256", "8192", compile8K),
				kvTransferConfig: nixlKV,
				envAfterHFHome:   disaggEnv("/shared-model-cache/flashinfer-workspaces/fi-23945310-sm100"),
			},
		},
	},
}

func TestGraphReproducesTheRecipe(t *testing.T) {
	for _, p := range profiles {
		t.Run(p.stack, func(t *testing.T) {
			r := mustRun(t, p.stack, nil)
			dgd := r.customResource(t, "DynamoGraphDeployment")
			assert.Equal(t, "nvidia.com/v1beta1", decode[string](t, dgd, "apiVersion"))
			assert.Equal(t, p.graph, decode[string](t, dgd, "metadata", "name"))
			assert.Equal(t, "inference", decode[string](t, dgd, "metadata", "namespace"))
			assert.Equal(t, map[string]string{"app.kubernetes.io/name": p.graph, "app.kubernetes.io/part-of": "dynamo",
				"app.kubernetes.io/managed-by": "pulumi", "app.kubernetes.io/instance": p.stack},
				decode[map[string]string](t, dgd, "metadata", "labels"))

			spec := graphSpec(t, r)
			assert.Equal(t, "vllm", spec.BackendFramework)
			assert.Nil(t, spec.Restart, "a new graph has no spec.restart")
			require.Len(t, spec.Components, 1+len(p.workers))

			fe := spec.Components[0]
			assert.Equal(t, "Frontend", fe.Name)
			assert.Equal(t, "frontend", fe.Type)
			assert.Equal(t, "1.6.0", fe.RuntimeVersionOverride)
			assert.Equal(t, 1, fe.Replicas)
			assert.Empty(t, fe.SharedMemorySize)
			assert.Empty(t, fe.PodTemplate.Annotations)
			assert.Nil(t, fe.ScalingAdapter)
			require.Len(t, fe.PodTemplate.Spec.Containers, 1)
			fc := fe.PodTemplate.Spec.Containers[0]
			assert.Equal(t, "main", fc.Name)
			assert.Equal(t, image, fc.Image)
			assert.Equal(t, corev1.PullIfNotPresent, fc.ImagePullPolicy)
			assert.Equal(t, []string{"python3"}, fc.Command)
			assert.Equal(t, p.frontendArgs, fc.Args)
			assert.Equal(t, env("HF_HUB_OFFLINE", "1", "TRANSFORMERS_OFFLINE", "1"), fc.Env)
			assert.Equal(t, resourceList{
				Requests: map[string]string{"cpu": "2", "memory": "8Gi", "ephemeral-storage": "512Mi"},
				Limits:   map[string]string{"cpu": "8", "memory": "24Gi", "ephemeral-storage": "12Gi"},
			}, resourcesOf(fc))
			assert.Empty(t, fe.PodTemplate.Spec.Volumes, "the beta frontend does not mount the cache")

			for i, w := range p.workers {
				c := spec.Components[i+1]
				assert.Equal(t, w.name, c.Name)
				assert.Equal(t, w.typ, c.Type)
				assert.Equal(t, "1.6.0", c.RuntimeVersionOverride)
				assert.Equal(t, 3, c.Replicas)
				assert.Equal(t, w.sharedMemory, c.SharedMemorySize)
				assert.Equal(t, map[string]string{
					"nvidia.com/vllm-distributed-executor-backend": "mp",
					// Beyond the recipe: roll one worker at a time with no surge (config.Rollout).
					"nvidia.com/deployment-strategy":                       "RollingUpdate",
					"nvidia.com/deployment-rolling-update-max-surge":       "0",
					"nvidia.com/deployment-rolling-update-max-unavailable": "1",
				}, c.PodTemplate.Annotations, "no checksum annotation while the workers read the recipe's speculative config")
				ps := c.PodTemplate.Spec
				channel := p.graph + "-cd-channel"
				assert.Equal(t, []corev1.PodResourceClaim{{Name: "compute-domain-channel", ResourceClaimTemplateName: &channel}}, ps.ResourceClaims)
				assert.Equal(t, w.grace, ps.TerminationGracePeriodSeconds)
				assert.Equal(t, []corev1.Volume{cacheVolume("shared-model-cache")}, ps.Volumes)
				require.Len(t, ps.Containers, 1)
				wc := ps.Containers[0]
				assert.Equal(t, "main", wc.Name)
				assert.Equal(t, image, wc.Image)
				assert.Equal(t, corev1.PullIfNotPresent, wc.ImagePullPolicy)
				assert.Equal(t, []string{"python3"}, wc.Command)
				assert.Equal(t, w.args, wc.Args, "the recipe's arguments in the recipe's order")
				zero := int64(0)
				assert.Equal(t, &corev1.SecurityContext{RunAsUser: &zero, RunAsGroup: &zero,
					Capabilities: &corev1.Capabilities{Add: []corev1.Capability{"IPC_LOCK", "SYS_PTRACE", "SYS_RESOURCE"}}}, wc.SecurityContext)
				wantEnv := append([]corev1.EnvVar{
					{Name: "KV_TRANSFER_CONFIG", Value: w.kvTransferConfig},
					{Name: "SPECULATIVE_CONFIG", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
						LocalObjectReference: corev1.LocalObjectReference{Name: p.graph + "-config"}, Key: "speculative-config"}}},
					{Name: "MODEL_NAME", Value: "nvidia/MiniMax-M3-NVFP4"},
					{Name: "SERVED_MODEL_NAME", Value: "nvidia/MiniMax-M3-NVFP4"},
					{Name: "HF_HOME", Value: "/shared-model-cache"},
				}, w.envAfterHFHome...)
				assert.Equal(t, wantEnv, wc.Env)
				assert.Equal(t, resourceList{
					Claims:   []string{"compute-domain-channel"},
					Requests: map[string]string{"cpu": "32", "memory": "448Gi", "nvidia.com/gpu": "4"},
					Limits:   map[string]string{"cpu": "128", "memory": w.memoryLimit, "nvidia.com/gpu": "4"},
				}, resourcesOf(wc))
				assert.Equal(t, []corev1.VolumeMount{{Name: "shared-model-cache", MountPath: "/shared-model-cache"}}, wc.VolumeMounts)
				// The recipe keeps the operator's startup probe (2 h) under an engine timeout of 4 h;
				// the program's outlasts the engine (config.WorkerConfig's fits).
				assert.Equal(t, &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/live", Port: intstr.FromString("system")}},
					PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 1500}, wc.StartupProbe)
				assert.Nil(t, wc.LivenessProbe)
				assert.Nil(t, wc.ReadinessProbe)
			}
		})
	}
}

func TestConfigMapHoldsRealAndSyntheticSpeculativeConfig(t *testing.T) {
	want := map[string]string{
		"speculative-config":           "{\n  \"method\": \"eagle3\",\n  \"model\": \"Inferact/MiniMax-M3-EAGLE3-GQA\",\n  \"revision\": \"" + draftRevision + "\",\n  \"num_speculative_tokens\": 3,\n  \"attention_backend\": \"FLASH_ATTN\",\n  \"use_local_argmax_reduction\": true\n}",
		"speculative-config-synthetic": "{\n  \"method\": \"eagle3\",\n  \"model\": \"Inferact/MiniMax-M3-EAGLE3-GQA\",\n  \"revision\": \"" + draftRevision + "\",\n  \"num_speculative_tokens\": 3,\n  \"attention_backend\": \"FLASH_ATTN\",\n  \"rejection_sample_method\": \"synthetic\",\n  \"synthetic_acceptance_length\": 2.89,\n  \"use_local_argmax_reduction\": true\n}",
	}
	for _, p := range profiles {
		t.Run(p.stack, func(t *testing.T) {
			cm := mustRun(t, p.stack, nil).one(t, "kubernetes:core/v1:ConfigMap")
			assert.Equal(t, p.graph+"-config", decode[string](t, cm, "metadata", "name"))
			assert.Equal(t, want, decode[map[string]string](t, cm, "data"))
		})
	}
}

func TestComputeDomainReproducesTheRecipe(t *testing.T) {
	for _, p := range profiles {
		t.Run(p.stack, func(t *testing.T) {
			cd := mustRun(t, p.stack, nil).customResource(t, "ComputeDomain")
			assert.Equal(t, "resource.nvidia.com/v1beta1", decode[string](t, cd, "apiVersion"))
			assert.Equal(t, p.graph+"-cd", decode[string](t, cd, "metadata", "name"))
			assert.Equal(t, "inference", decode[string](t, cd, "metadata", "namespace"))
			assert.Equal(t, manifest.ComputeDomainSpec{NumNodes: 0, Channel: manifest.ComputeDomainChannel{
				ResourceClaimTemplate: corev1.LocalObjectReference{Name: p.graph + "-cd-channel"}}},
				decode[manifest.ComputeDomainSpec](t, cd, "spec"))
		})
	}
}

func TestModelCacheReproducesTheRecipe(t *testing.T) {
	for _, p := range profiles {
		t.Run(p.stack, func(t *testing.T) {
			r := mustRun(t, p.stack, nil)
			pvc := r.one(t, "kubernetes:core/v1:PersistentVolumeClaim")
			assert.Equal(t, "shared-model-cache", decode[string](t, pvc, "metadata", "name"))
			assert.Equal(t, "inference", decode[string](t, pvc, "metadata", "namespace"))
			assert.Equal(t, []string{"ReadWriteMany"}, decode[[]string](t, pvc, "spec", "accessModes"))
			assert.Equal(t, "1000Gi", decode[string](t, pvc, "spec", "resources", "requests", "storage"))
			assert.Equal(t, "rwx-fast", decode[string](t, pvc, "spec", "storageClassName"))

			job := r.one(t, "kubernetes:batch/v1:Job")
			assert.Equal(t, "minimax-m3-model-download", decode[string](t, job, "metadata", "name"))
			assert.Equal(t, 3, decode[int](t, job, "spec", "backoffLimit"))
			assert.Equal(t, 1, decode[int](t, job, "spec", "completions"))
			assert.Equal(t, 1, decode[int](t, job, "spec", "parallelism"))
			assert.Equal(t, 4*3600, decode[int](t, job, "spec", "template", "spec", "activeDeadlineSeconds"), "Kubernetes ends an attempt at the 4h timeout")
			assert.Equal(t, map[string]string{"app": "minimax-m3-model-download"}, decode[map[string]string](t, job, "spec", "template", "metadata", "labels"))
			pod := decode[corev1.PodSpec](t, job, "spec", "template", "spec")
			assert.Equal(t, corev1.RestartPolicyNever, pod.RestartPolicy)
			assert.Equal(t, []corev1.Volume{cacheVolume("shared-model-cache")}, pod.Volumes)
			require.Len(t, pod.Containers, 1)
			c := pod.Containers[0]
			assert.Equal(t, "model-download", c.Name)
			assert.Equal(t, "python:3.10-slim", c.Image)
			assert.Equal(t, corev1.PullIfNotPresent, c.ImagePullPolicy)
			no := false
			assert.Equal(t, &corev1.SecurityContext{AllowPrivilegeEscalation: &no,
				Capabilities: &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}}, SeccompProfile: &corev1.SeccompProfile{Type: "RuntimeDefault"}}, c.SecurityContext)
			assert.Equal(t, []string{"sh", "-c"}, c.Command)
			assert.Equal(t, []corev1.EnvFromSource{secretEnv("hf-token-secret")}, c.EnvFrom)
			assert.Equal(t, env("HF_HOME", "/shared-model-cache", "HF_XET_HIGH_PERFORMANCE", "1"), c.Env)
			assert.Equal(t, []string{"set -eux\npip install --no-cache-dir huggingface_hub==1.16.4\n" +
				"hf download nvidia/MiniMax-M3-NVFP4 \\\n  --revision " + modelRevision + "\n" +
				"hf download Inferact/MiniMax-M3-EAGLE3-GQA \\\n  --revision " + draftRevision + "\n"}, c.Args)
			assert.Equal(t, []corev1.VolumeMount{{Name: "shared-model-cache", MountPath: "/shared-model-cache"}}, c.VolumeMounts)
			assert.Empty(t, resourcesOf(c), "the download's resources are left to the namespace defaults")
		})
	}
}

func TestHFTokenSecretAndNamespace(t *testing.T) {
	for _, p := range profiles {
		t.Run(p.stack, func(t *testing.T) {
			r := mustRun(t, p.stack, nil)
			ns := r.one(t, "kubernetes:core/v1:Namespace")
			assert.Equal(t, "inference", decode[string](t, ns, "metadata", "name"))
			labels := decode[map[string]string](t, ns, "metadata", "labels")
			// No site install found: privileged, said in so many words (the workers add capabilities
			// baseline refuses), warned and audited at baseline, and the recipe's workers.
			assert.Equal(t, "privileged", labels["pod-security.kubernetes.io/enforce"], "%v", labels)
			assert.Equal(t, "baseline", labels["pod-security.kubernetes.io/warn"])
			assert.Equal(t, "baseline", labels["pod-security.kubernetes.io/audit"])
			assert.NotContains(t, labels, config.PodPolicyLabel)
			for _, w := range graphSpec(t, r).Components[1:] {
				assert.Nil(t, w.PodTemplate.Spec.RuntimeClassName, "%s: the recipe's, no RuntimeClass", w.Name)
			}
			s := r.one(t, "kubernetes:core/v1:Secret")
			assert.Equal(t, "hf-token-secret", decode[string](t, s, "metadata", "name"))
			assert.Equal(t, "inference", decode[string](t, s, "metadata", "namespace"))
			assert.True(t, s.Inputs["stringData"].ContainsSecrets(), "the token is a secret input")
			assert.Equal(t, map[string]string{"HF_TOKEN": testToken}, decode[map[string]string](t, s, "stringData"))
		})
	}
}

func TestOutputsExposeTheFrontend(t *testing.T) {
	for _, p := range profiles {
		t.Run(p.stack, func(t *testing.T) {
			o := mustRun(t, p.stack, nil).outputs
			require.NotNil(t, o)
			assert.Equal(t, "inference", o["namespace"])
			assert.Equal(t, p.graph, o["graphName"])
			assert.Equal(t, p.graph+"-frontend", o["frontendService"])
			assert.EqualValues(t, 8000, o["frontendPort"])
			assert.Equal(t, "http://"+p.graph+"-frontend.inference.svc.cluster.local:8000", o["frontendUrl"])
			assert.Equal(t, "kubectl -n inference port-forward service/"+p.graph+"-frontend 8000:8000", o["portForwardCommand"])
			assert.Equal(t, "curl --fail-with-body http://localhost:8000/v1/models", o["smokeTestModels"])
			assert.Contains(t, o["smokeTestChat"], "http://localhost:8000/v1/chat/completions")
			assert.Contains(t, o["smokeTestChat"], `"model":"nvidia/MiniMax-M3-NVFP4"`)
			assert.EqualValues(t, p.gpus, o["gpuCount"])
			assert.Equal(t, modelRevision, o["modelRevision"])
			assert.Equal(t, draftRevision, o["draftRevision"])
			assert.Equal(t, p.graph+"-cd", o["computeDomain"])
			assert.Equal(t, "shared-model-cache", o["cacheClaimName"])
			assert.Equal(t, "real", o["speculativeMode"])
		})
	}
}
