package unit

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"minimax-m3/config"
	"minimax-m3/policy"
)

// plan is what a first preview of the program would do: create every resource it registers.
func plan(t *testing.T, stack string, overrides map[string]string) policy.Plan {
	t.Helper()
	r := mustRun(t, stack, overrides)
	var p policy.Plan
	for _, rec := range r.resources {
		p.Steps = append(p.Steps, policy.Step{
			URN:  "urn:pulumi:" + stack + "::minimax-m3::" + rec.Type + "::" + rec.Name,
			Type: rec.Type, Name: rec.Name, Op: "create", New: plain(t, rec.Inputs),
		})
	}
	return p
}

// rules lists the rules of the violations.
func rules(vs []policy.Violation) []string {
	var out []string
	for _, v := range vs {
		out = append(out, v.Rule)
	}
	return out
}

// step finds a step by its resource's Kubernetes kind.
func step(t *testing.T, p policy.Plan, kind string) *policy.Step {
	t.Helper()
	for i := range p.Steps {
		if p.Steps[i].Kind() == kind {
			return &p.Steps[i]
		}
	}
	t.Fatalf("no %s in the plan", kind)
	return nil
}

// component returns a graph component's pod template spec from a step's new inputs.
func component(t *testing.T, s *policy.Step, name string) map[string]any {
	t.Helper()
	for _, c := range s.New["spec"].(map[string]any)["components"].([]any) {
		if c.(map[string]any)["name"] == name {
			return c.(map[string]any)["podTemplate"].(map[string]any)["spec"].(map[string]any)
		}
	}
	t.Fatalf("no component %s", name)
	return nil
}

func mainContainer(spec map[string]any) map[string]any {
	return spec["containers"].([]any)[0].(map[string]any)
}

func TestPoliciesPassOnBothStacks(t *testing.T) {
	for _, stack := range []string{"agg", "disagg"} {
		t.Run(stack, func(t *testing.T) {
			// The token Secret's value is in the plan (unmasked here), and passes: only a Secret holds it.
			assert.Empty(t, policy.Check(plan(t, stack, nil)))
		})
	}
}

func TestPolicyHFTokenFromSecret(t *testing.T) {
	// A pod template patch that puts the token in the worker's environment in plain text.
	p := plan(t, "agg", map[string]string{
		"minimax-m3:worker": `{"podTemplatePatch": {"spec": {"containers": [{"name": "main", "env": [{"name": "HF_TOKEN", "value": "hf_abcdefghijklmnopqrstuvwxyz"}]}]}}}`,
	})
	vs := policy.Check(p)
	require.NotEmpty(t, vs)
	assert.Equal(t, "hf-token-from-secret", vs[0].Rule)
	assert.Contains(t, vs[0].String(), "component Worker container main: env HF_TOKEN must come from a Secret")

	// The same variable from a ConfigMap is no better; a token pasted into a ConfigMap is caught too.
	p = plan(t, "agg", nil)
	job := step(t, p, "Job")
	c := mainContainer(job.New["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any))
	c["env"] = append(c["env"].([]any), map[string]any{"name": "HUGGING_FACE_HUB_TOKEN", "valueFrom": map[string]any{"configMapKeyRef": map[string]any{"name": "x", "key": "token"}}})
	step(t, p, "ConfigMap").New["data"].(map[string]any)["note"] = "token hf_abcdefghijklmnopqrstuvwxyz"
	vs = policy.Check(p)
	assert.Equal(t, []string{"hf-token-from-secret", "hf-token-from-secret", "reads-own-objects"}, rules(vs))
	assert.Contains(t, vs[0].Message, "env HUGGING_FACE_HUB_TOKEN must come from a Secret")
	assert.Contains(t, vs[1].Message, "only a Secret may")
	assert.Contains(t, vs[2].Message, `env[2] HUGGING_FACE_HUB_TOKEN: reads ConfigMap "x", which is not the stack's`)
}

// The attack a security review found: a pod template patch that shares the node's PID namespace,
// mounts its root and runs privileged. Config validation refuses it at the patch's key; the policy
// refuses the same pod however it got into the plan (here written into the plan directly, as a
// program change or an override would), field by field.
func TestPolicyPodSecurity(t *testing.T) {
	patch := `{"podTemplatePatch": {"spec": {"hostPID": true, "volumes": [{"name": "h", "hostPath": {"path": "/"}}], ` +
		`"containers": [{"name": "main", "image": "evil.example/x:1", "securityContext": {"privileged": true}, "volumeMounts": [{"name": "h", "mountPath": "/h"}]}]}}}`
	_, err := config.Parse(config.Raw{Values: map[string]string{"profile": "agg", "namespace": `{"name":"inference"}`, "hfToken": "hf_test", "frontend": patch},
		Secrets: map[string]bool{"hfToken": true}})
	require.Error(t, err)
	for _, want := range []string{"minimax-m3:frontend.podTemplatePatch: Pod Security baseline: host namespaces (hostPID=true)",
		`minimax-m3:frontend.podTemplatePatch: Pod Security baseline: hostPath volumes (volume "h")`,
		`minimax-m3:frontend.podTemplatePatch: Pod Security baseline: privileged (container "main" must not set securityContext.privileged=true)`} {
		assert.Contains(t, err.Error(), want)
	}

	p := plan(t, "agg", nil)
	graph := step(t, p, "DynamoGraphDeployment")
	for _, comp := range graph.New["spec"].(map[string]any)["components"].([]any) {
		cm := comp.(map[string]any)
		if cm["name"] != "Frontend" {
			continue
		}
		spec := cm["podTemplate"].(map[string]any)["spec"].(map[string]any)
		spec["hostPID"] = true
		spec["volumes"] = []any{map[string]any{"name": "h", "hostPath": map[string]any{"path": "/"}}}
		mainContainer(spec)["securityContext"] = map[string]any{"privileged": true, "capabilities": map[string]any{"add": []any{"NET_ADMIN"}}}
	}
	job := step(t, p, "Job")
	job.New["spec"].(map[string]any)["template"].(map[string]any)["spec"].(map[string]any)["serviceAccountName"] = "cluster-admin-sa"
	vs := policy.Check(p)
	assert.Equal(t, []string{"pod-security", "pod-security", "pod-security", "pod-security", "pod-security"}, rules(vs))
	text := fmt.Sprint(vs)
	for _, want := range []string{"component Frontend: Pod Security baseline: host namespaces (hostPID=true)", `component Frontend: Pod Security baseline: hostPath volumes (volume "h")`,
		`component Frontend: Pod Security baseline: privileged (container "main"`, `non-default capabilities (container "main" must not include "NET_ADMIN"`,
		`spec.serviceAccountName: runs with ServiceAccount "cluster-admin-sa"`} {
		assert.Contains(t, text, want)
	}
}

func TestPolicyGPURequestEqualsLimit(t *testing.T) {
	p := plan(t, "disagg", map[string]string{
		"minimax-m3:decodeWorker": `{"podTemplatePatch": {"spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "8"}}}]}}}`,
	})
	vs := policy.Check(p)
	require.Equal(t, []string{"gpu-request-equals-limit"}, rules(vs))
	assert.Contains(t, vs[0].String(), "component DecodeWorker container main: requests 4 but limits 8 nvidia.com/gpu")

	p = plan(t, "agg", nil)
	res := mainContainer(component(t, step(t, p, "DynamoGraphDeployment"), "Worker"))["resources"].(map[string]any)
	delete(res["limits"].(map[string]any), "nvidia.com/gpu")
	vs = policy.Check(p)
	require.Equal(t, []string{"gpu-request-equals-limit"}, rules(vs))
	assert.Contains(t, vs[0].Message, "requests 4 nvidia.com/gpu with no limit")
}

func TestPolicyOneComputeDomainChannel(t *testing.T) {
	// Prefill and decode workers on different channels: NVLink (and NIXL over it) would not span them.
	p := plan(t, "disagg", nil)
	decode := component(t, step(t, p, "DynamoGraphDeployment"), "DecodeWorker")
	claim := decode["resourceClaims"].([]any)[0].(map[string]any)
	claim["resourceClaimTemplateName"] = "other-cd-channel"
	vs := policy.Check(p)
	require.Equal(t, []string{"one-compute-domain-channel", "one-compute-domain-channel"}, rules(vs))
	assert.Contains(t, vs[0].String(), `component DecodeWorker: claims channel template "other-cd-channel", which no ComputeDomain of the stack provides`)
	assert.Contains(t, vs[1].Message, "workers claim different ComputeDomain channels")

	// A GPU container that does not claim the channel at all.
	p = plan(t, "agg", nil)
	res := mainContainer(component(t, step(t, p, "DynamoGraphDeployment"), "Worker"))["resources"].(map[string]any)
	delete(res, "claims")
	vs = policy.Check(p)
	require.Equal(t, []string{"one-compute-domain-channel"}, rules(vs))
	assert.Contains(t, vs[0].Message, "claims no ComputeDomain channel")
}

func TestPolicyPinnedImages(t *testing.T) {
	p := plan(t, "agg", map[string]string{"minimax-m3:image": "nvcr.io/nvidia/ai-dynamo/vllm-runtime:latest"})
	vs := policy.Check(p)
	require.NotEmpty(t, vs)
	for _, v := range vs {
		assert.Equal(t, "pinned-images", v.Rule)
		assert.Contains(t, v.Message, "is not pinned")
	}
	assert.Len(t, vs, 2, "the frontend's and the worker's")

	p = plan(t, "agg", map[string]string{"minimax-m3:modelDownload": `{"image": "python"}`})
	vs = policy.Check(p)
	require.Equal(t, []string{"pinned-images"}, rules(vs))
	assert.Contains(t, vs[0].String(), `Job`)
	assert.Contains(t, vs[0].Message, `image "python" has no tag or digest`)

	digest := "nvcr.io/nvidia/ai-dynamo/vllm-runtime@sha256:" + strings.Repeat("ab", 32)
	assert.Empty(t, policy.Check(plan(t, "agg", map[string]string{"minimax-m3:image": digest})))
}

func TestPolicySyntheticOnlyForBenchmark(t *testing.T) {
	synthetic := map[string]string{"minimax-m3:speculativeDecoding": `{"mode": "synthetic"}`}
	vs := policy.Check(plan(t, "disagg", synthetic))
	require.Equal(t, []string{"synthetic-only-for-benchmark", "synthetic-only-for-benchmark"}, rules(vs))
	assert.Contains(t, vs[0].String(), "component PrefillWorker container main: env SPECULATIVE_CONFIG selects synthetic speculative acceptance")
	assert.Contains(t, vs[0].Message, "set benchmark.enabled")

	synthetic["minimax-m3:benchmark"] = `{"enabled": true}`
	assert.Empty(t, policy.Check(plan(t, "disagg", synthetic)))
}

func TestPolicyKeepModelCacheNamespaceAndAdopted(t *testing.T) {
	p := plan(t, "agg", nil)
	for i := range p.Steps {
		p.Steps[i].Old = p.Steps[i].New
		p.Steps[i].Op = "same"
	}
	pvc, ns, dgd := step(t, p, "PersistentVolumeClaim"), step(t, p, "Namespace"), step(t, p, "DynamoGraphDeployment")
	pvc.Op, pvc.Diffs = "replace", []string{"spec.storageClassName"}
	ns.Op = "delete"
	dgd.Op = "replace"
	vs := policy.Check(p)
	require.Equal(t, []string{"keep-model-cache", "keep-namespace"}, rules(vs))
	assert.Contains(t, vs[0].String(), "PersistentVolumeClaim inference/shared-model-cache: this change would replace it (spec.storageClassName)")
	assert.Contains(t, vs[1].String(), "Namespace inference: this change would delete it")

	// A retained claim that leaves the stack stays in the cluster: not a violation.
	pvc.Op, pvc.Retained = "delete", true
	ns.Op = "same"
	assert.Empty(t, policy.Check(p))

	// On a stack that adopted the recipe's objects, replacing the graph is one.
	p.Adopted = true
	vs = policy.Check(p)
	require.Equal(t, []string{"keep-adopted"}, rules(vs))
	assert.Contains(t, vs[0].Message, "would replace an object the stack adopted")
}

func TestRolls(t *testing.T) {
	before := plan(t, "disagg", nil)
	after := plan(t, "disagg", map[string]string{"minimax-m3:decodeWorker": `{"vllm": {"maxNumSeqs": 32}, "replicas": 4}`})
	old, new := step(t, before, "DynamoGraphDeployment"), step(t, after, "DynamoGraphDeployment")
	update := policy.Plan{Steps: []policy.Step{{Type: old.Type, Name: old.Name, Op: "update", Old: old.New, New: new.New}}}
	rolls := policy.Rolls(update)
	require.Len(t, rolls, 3)
	assert.Equal(t, []string{"DynamoGraphDeployment inference/minimax-m3-disagg-gb200-agentic: workers roll: DecodeWorker=yes Frontend=no PrefillWorker=no"}, policy.Summary(rolls))
	assert.Equal(t, []string{"podTemplate.spec.containers[0].args[18]"}, rolls[0].Why, "the flag's value; replicas do not roll")

	// The PR check fails on a roll its label does not allow.
	assert.Equal(t, []string{"DecodeWorker"}, rolledComponents(policy.UnexpectedRolls(rolls, "")))
	assert.Equal(t, []string{"DecodeWorker"}, rolledComponents(policy.UnexpectedRolls(rolls, "PrefillWorker")))
	assert.Empty(t, policy.UnexpectedRolls(rolls, "DecodeWorker,PrefillWorker"))
	assert.Empty(t, policy.UnexpectedRolls(rolls, "all"))

	// A scale alone rolls nothing.
	scaled := plan(t, "disagg", map[string]string{"minimax-m3:decodeWorker": `{"replicas": 4}`})
	update.Steps[0].New = step(t, scaled, "DynamoGraphDeployment").New
	assert.Equal(t, []string{"DynamoGraphDeployment inference/minimax-m3-disagg-gb200-agentic: workers roll: DecodeWorker=no Frontend=no PrefillWorker=no"}, policy.Summary(policy.Rolls(update)))

	// spec.restart restarts every component.
	restarted := step(t, plan(t, "disagg", nil), "DynamoGraphDeployment").New
	restarted["spec"].(map[string]any)["restart"] = map[string]any{"id": "2026-12-02"}
	update.Steps[0].New = restarted
	for _, r := range policy.Rolls(update) {
		assert.True(t, r.Rolls, r.Component)
		assert.Contains(t, r.Why, "spec.restart")
	}
}

func TestCompact(t *testing.T) {
	assert.Equal(t, []string{"metadata.labels", "spec.args[3 items]", "spec.env[1 item]"},
		policy.Compact([]string{"metadata.labels", "spec.args[9]", "spec.args[10]", "spec.env[0]", "spec.args[47]"}))
}

func TestStackFileAdopts(t *testing.T) {
	for body, want := range map[string]bool{
		"config:\n  minimax-m3:profile: agg\n  minimax-m3:adopt: true\n": true,
		"config:\n  minimax-m3:adopt: \"true\"\n":                        true,
		"config:\n  minimax-m3:adopt: false\n":                           false,
		"config:\n  minimax-m3:profile: agg\n":                           false,
	} {
		path := filepath.Join(t.TempDir(), "Pulumi.agg.yaml")
		require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
		got, err := policy.StackFileAdopts(path)
		require.NoError(t, err)
		assert.Equal(t, want, got, body)
	}
	// A stack that does not set it takes the project file's value or declared default: a branch
	// that turns the default on adopts for every stack, and the rule sees it.
	for project, want := range map[string]bool{
		"config:\n  adopt:\n    type: boolean\n    default: true\n":  true,
		"config:\n  adopt:\n    type: boolean\n    default: false\n": false,
		"config:\n  minimax-m3:adopt: true\n":                        true,
		"config:\n  adopt:\n    value: \"True\"\n":                   true,
	} {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), []byte("name: minimax-m3\nruntime: go\n"+project), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.agg.yaml"), []byte("config:\n  minimax-m3:profile: agg\n"), 0o644))
		got, err := policy.StackFileAdopts(filepath.Join(dir, "Pulumi.agg.yaml"))
		require.NoError(t, err)
		assert.Equal(t, want, got, project)
	}
	// An environment may set it: the stack file must say.
	path := filepath.Join(t.TempDir(), "Pulumi.agg.yaml")
	require.NoError(t, os.WriteFile(path, []byte("environment:\n  - site/gb200\nconfig:\n  minimax-m3:profile: agg\n"), 0o644))
	_, err := policy.StackFileAdopts(path)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "set minimax-m3:adopt")
	require.NoError(t, os.WriteFile(path, []byte("environment:\n  - site/gb200\nconfig:\n  minimax-m3:adopt: false\n"), 0o644))
	got, err := policy.StackFileAdopts(path)
	require.NoError(t, err)
	assert.False(t, got)

	got, err = policy.StackFileAdopts(filepath.Join("..", "..", "..", "Pulumi.agg.yaml"))
	require.NoError(t, err)
	assert.False(t, got, "the project's own stacks do not adopt")
}

func rolledComponents(rolls []policy.Roll) []string {
	var out []string
	for _, r := range rolls {
		out = append(out, r.Component)
	}
	return out
}

// An image from a registry the site does not allow: config validation refuses it at its key, and
// the policy refuses the same pod however it got into the plan, against the site's list (the
// recipe's by default), never one the plan itself could carry.
func TestPolicyAllowedRegistries(t *testing.T) {
	p := plan(t, "agg", nil)
	assert.NotContains(t, rules(policy.Check(p)), "allowed-registries", "the recipe's images are from the recipe's registries")
	graph := step(t, p, "DynamoGraphDeployment")
	mainContainer(component(t, graph, "Frontend"))["image"] = "evil.example/x:1"
	vs := policy.Check(p)
	assert.Equal(t, []string{"allowed-registries"}, rules(vs))
	assert.Contains(t, fmt.Sprint(vs), `component Frontend container main: image "evil.example/x:1" is not from a registry the site allows (nvcr.io/nvidia, docker.io/library)`)
	p.ImageRegistries = []string{"nvcr.io", "docker.io", "evil.example"}
	assert.Empty(t, policy.Check(p), "a site that allows it")
	p.ImageRegistries = []string{"registry.example.com/mirror"}
	text := fmt.Sprint(policy.Check(p))
	for _, want := range []string{`container model-download: image "python:3.10-slim"`, `component Worker container main: image "nvcr.io/nvidia/ai-dynamo/vllm-runtime:`} {
		assert.Contains(t, text, want, "a site with a mirror of its own: the recipe's images are named")
	}
}

func TestPolicyMonitorsOwnNamespace(t *testing.T) {
	on := observabilityOn(nil)
	p := plan(t, "agg", on)
	assert.Empty(t, policy.Check(p), "the program's monitors select their own namespace")
	monitor := step(t, p, "PodMonitor")
	sel := monitor.New["spec"].(map[string]any)["namespaceSelector"].(map[string]any)
	sel["matchNames"] = []any{"inference", "team-b"}
	vs := policy.Check(p)
	assert.Equal(t, []string{"monitors-own-namespace"}, rules(vs))
	assert.Contains(t, vs[0].String(), "namespaceSelector.matchNames names team-b, not its own namespace inference")
	delete(sel, "matchNames")
	sel["any"] = true
	assert.Equal(t, []string{"monitors-own-namespace"}, rules(policy.Check(p)))
}

// The fleet's rules beyond baseline, however a pod got into the plan: the workers' exemption is
// theirs alone, a priority class counts only when the site lists it (never the stack), and the
// runtime's and the operator's variables and another stack's Secret are refused.
func TestPolicyFleetRulesBeyondBaseline(t *testing.T) {
	p := plan(t, "agg", nil)
	assert.Empty(t, policy.Check(p), "the stack's own pods, workers' capabilities and root included")

	graph := step(t, p, "DynamoGraphDeployment")
	for _, comp := range graph.New["spec"].(map[string]any)["components"].([]any) {
		cm := comp.(map[string]any)
		spec := cm["podTemplate"].(map[string]any)["spec"].(map[string]any)
		c := mainContainer(spec)
		switch cm["name"] {
		case "Frontend":
			c["securityContext"] = map[string]any{"runAsUser": 0, "capabilities": map[string]any{"add": []any{"IPC_LOCK"}}}
			c["env"] = []any{map[string]any{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}}
			spec["priorityClassName"] = "system-node-critical"
		case "Worker":
			c["env"] = append(c["env"].([]any), map[string]any{"name": "DYN_NAMESPACE", "value": "team-b"},
				map[string]any{"name": "T", "valueFrom": map[string]any{"secretKeyRef": map[string]any{"name": "team-b-token", "key": "t"}}})
			spec["volumes"] = append(spec["volumes"].([]any), map[string]any{"name": "n", "nfs": map[string]any{"server": "10.0.0.9", "path": "/"}})
		}
	}
	text := fmt.Sprint(policy.Check(p))
	for _, want := range []string{
		`component Frontend: Pod Security baseline: non-default capabilities (container "main" must not include "IPC_LOCK"`,
		"component Frontend: spec.containers[0] (main).securityContext.runAsUser: 0 (root) outside a worker's main container",
		"component Frontend: spec.containers[0] (main).env[0] NVIDIA_VISIBLE_DEVICES: NVIDIA_* is the NVIDIA container runtime's",
		`component Frontend: spec.priorityClassName: "system-node-critical" is not a priority class the site allows (none)`,
		"component Worker: spec.containers[0] (main).env[",
		"DYN_NAMESPACE: the Dynamo operator writes it",
		`[reads-own-objects] DynamoGraphDeployment inference/minimax-m3-agg-gb200-agentic component Worker: spec.containers[0] (main).env[`,
		`T: reads Secret "team-b-token", which is not the stack's`,
		"component Worker: spec.volumes[1] (n): a nfs volume",
	} {
		assert.Contains(t, text, want)
	}
	assert.NotContains(t, text, `component Worker: Pod Security baseline`, "the worker's own capabilities are its exemption")

	// The site's list, given to the policies (never read from the stack), admits the class.
	p.PriorityClasses = []string{"system-node-critical"}
	assert.NotContains(t, fmt.Sprint(policy.Check(p)), "spec.priorityClassName")
}
