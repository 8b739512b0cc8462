package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"minimax-m3/teamboundary"
	"minimax-m3/tests/framework/rackbox"
)

// boxSite is the site's install on the box, made as the box starts (before any stack, so every
// test sees the same site), through the package's Site resource in a Pulumi YAML program (the real
// CLI, engine, plugin and provider, as a site's own program in any language applies it): the
// admission policies, bound to the namespaces labelled for them (the team namespaces, and the
// namespaces stacks create, which enforce baseline where the site is found), the teams'
// namespaces, roles and workspace accounts. It stays until the box stops.
var boxSite struct {
	log     syncBuffer
	outputs struct {
		PodPolicy   string   `json:"podPolicy"`
		GraphPolicy string   `json:"graphPolicy"`
		Namespaces  []string `json:"namespaces"`
	}
}

// boxWorkspaces is the box's namespace of the Pulumi Kubernetes Operator's Stacks, where the site
// gives each team its workspace ServiceAccount.
const boxWorkspaces = "box-workspaces"

// boxGatewayNamespace holds the box's site Gateway "inference", whose listener "https" takes
// HTTPRoutes from every namespace (no Gateway controller runs: the route check reads its spec).
const boxGatewayNamespace = "box-site-gateways"

// startGateway makes the box's site Gateway (rackBox, once).
func startGateway(b *rackbox.Box) error {
	ctx := context.Background()
	for _, obj := range []*unstructured.Unstructured{
		{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": boxGatewayNamespace}}},
		{Object: map[string]any{"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway", "metadata": map[string]any{"name": "inference", "namespace": boxGatewayNamespace},
			"spec": map[string]any{"gatewayClassName": "site", "listeners": []any{map[string]any{"name": "https", "protocol": "HTTP", "port": int64(80),
				"allowedRoutes": map[string]any{"namespaces": map[string]any{"from": "All"}}}}}}},
	} {
		if err := b.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("the box's site Gateway: %s: %w", obj.GetKind(), err)
		}
	}
	return nil
}

// startSite installs the site on the box (rackBox, once). It runs off any test: it returns its
// error instead of failing one.
func startSite(b *rackbox.Box) error {
	ctx := context.Background()
	if err := b.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: boxWorkspaces}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	plugin, err := packagePluginBuilt()
	if err != nil {
		return err
	}
	dir := filepath.Join(built.dir, "site")
	if err := os.MkdirAll(filepath.Join(dir, "state"), 0o755); err != nil {
		return err
	}
	env := map[string]string{
		"PULUMI_BACKEND_URL":       "file://" + filepath.Join(dir, "state"),
		"PULUMI_CONFIG_PASSPHRASE": "integration-tests",
		"PULUMI_HOME":              filepath.Join(cluster.root, ".toolchain", "pulumi-home"),
		"PULUMI_SKIP_UPDATE_CHECK": "true",
		"KUBECONFIG":               b.Kubeconfig,
		"PATH":                     os.Getenv("PATH"),
	}
	// The portal's identity in the box is its admin user, which may impersonate anyway.
	program := fmt.Sprintf(`name: minimax-m3-site
runtime: yaml
packages:
  minimax-m3: %s
resources:
  site:
    type: minimax-m3:index:Site
    properties:
      teams:
        team-a: [box-guarded-a]
        team-b: [box-guarded-b]
        team-c: [box-guarded-c]
        team-d: [box-guarded-d]
      workerRuntimeClass: %s
      portalUser: pulumi
      workspaces: %s
outputs:
  podPolicy: ${site.podPolicy}
  graphPolicy: ${site.graphPolicy}
  namespaces: ${site.namespaces}
`, plugin, rackbox.WorkerRuntimeClass, boxWorkspaces)
	if err := os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), []byte(program), 0o644); err != nil {
		return err
	}
	run := pulumiRunner(dir, env, &boxSite.log)
	for _, args := range [][]string{{"stack", "init", "site"}, {"up", "--yes", "--skip-preview"}} {
		if _, err := run(args...); err != nil {
			return fmt.Errorf("the site's install: pulumi %s: %w\n%s", strings.Join(args, " "), err, boxSite.log.String())
		}
	}
	out, err := run("stack", "output", "--json")
	if err != nil {
		return fmt.Errorf("the site's outputs: %w\n%s", err, boxSite.log.String())
	}
	return json.Unmarshal([]byte(out), &boxSite.outputs)
}

// boxPKOCRDs installs the Pulumi Kubernetes Operator's CRDs in the box once.
var boxPKOCRDs struct {
	once sync.Once
	err  error
}

func installBoxPKOCRDs(t *testing.T) {
	t.Helper()
	dir := pkoCRDs(t)
	boxPKOCRDs.once.Do(func() {
		_, boxPKOCRDs.err = envtest.InstallCRDs(restConfigOf(t, box.Kubeconfig), envtest.CRDInstallOptions{Paths: []string{dir}, ErrorIfPathMissing: true, MaxTime: time.Minute})
	})
	require.NoError(t, boxPKOCRDs.err)
}

// installTeamBoundary waits until the API server enforces the site's pod policy in namespace ns.
func installTeamBoundary(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	// The API server compiles a new policy and starts enforcing it shortly after its binding
	// exists: wait until a pod it refuses is refused.
	probe := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "probe"}, Spec: corev1.PodSpec{
		RuntimeClassName: ptrTo(rackbox.WorkerRuntimeClass),
		Containers:       []corev1.Container{{Name: "main", Image: rackbox.HeldImage, Env: []corev1.EnvVar{{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"}}}},
	}}
	graph := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "nvidia.com/v1beta1", "kind": "DynamoGraphDeployment",
		"metadata": map[string]any{"name": "probe", "namespace": ns},
		"spec":     map[string]any{"backendFramework": "vllm", "env": []any{map[string]any{"name": "DYN_NAMESPACE", "value": "x"}}},
	}}
	deadline := time.Now().Add(time.Minute)
	for _, p := range []struct {
		obj    client.Object
		policy string
	}{{probe, teamboundary.PolicyName}, {graph, teamboundary.GraphPolicyName}} {
		for {
			err := box.Client.Create(ctx, p.obj.DeepCopyObject().(client.Object), client.DryRunAll)
			if err != nil && strings.Contains(err.Error(), p.policy) {
				break
			}
			require.True(t, time.Now().Before(deadline), "the API server does not enforce %s after a minute: %v", p.policy, err)
			time.Sleep(200 * time.Millisecond)
		}
	}
}

func ptrTo[T any](v T) *T { return &v }

// What a hostile team tried, applied with the real kubectl outside Pulumi into its own baseline
// namespace: each pod is refused by the box's API server. The pods take the workers' RuntimeClass,
// which Pod Security admission exempts, so the refusal is the admission policy's alone; the last
// pods take none and meet Pod Security's own baseline. The stacks' own pods, from an agg stack
// deployed into the namespace with every guard on, are admitted and run.
func TestBoxTeamNamespaceRefusesBypassPodsAndAdmitsTheStacks(t *testing.T) {
	parallelOnBox(t)
	rackBox(t)
	const ns = "box-guarded-a"
	installTeamBoundary(t, ns)

	// Each bypass pod carries a worker's label and RuntimeClass, which Pod Security admission
	// exempts: the refusal is the admission policy's alone, and the worker's exemption (its main
	// container's capabilities and root) covers no other container ("app").
	pod := func(name, spec string) string {
		return "apiVersion: v1\nkind: Pod\nmetadata: {name: " + name + ", namespace: " + ns + ", labels: {nvidia.com/dynamo-component-type: worker}}\nspec:\n  runtimeClassName: " + rackbox.WorkerRuntimeClass + "\n" + spec
	}
	const img = "    image: " + rackbox.HeldImage + "\n"
	app := "  containers: [{name: app, image: " + rackbox.HeldImage + "}]\n"
	bypasses := []struct{ name, manifest, refusal string }{
		{"nfs", pod("nfs", "  containers: [{name: app, image: "+rackbox.HeldImage+", volumeMounts: [{name: share, mountPath: /data}]}]\n  volumes: [{name: share, nfs: {server: 10.0.0.9, path: /}}]\n"), "volumes: a team's pods mount only"},
		{"inline csi at /", pod("csi", app+"  volumes: [{name: csi, csi: {driver: nfs.csi.k8s.io, volumeAttributes: {server: 10.0.0.9, share: /}}}]\n"), "volumes: a team's pods mount only"},
		{"another team's volume through an ephemeral claim", pod("ephemeral", app+"  volumes: [{name: eph, ephemeral: {volumeClaimTemplate: {spec: {accessModes: [ReadWriteOnce], volumeName: team-b-weights, resources: {requests: {storage: 1Gi}}}}}}]\n"), "volumes: a team's pods mount only"},
		{"gitRepo", pod("gitrepo", app+"  volumes: [{name: git, gitRepo: {repository: 'https://example.com/x.git'}}]\n"), "volumes: a team's pods mount only"},
		{"hostPath", pod("hostpath", app+"  volumes: [{name: host, hostPath: {path: /}}]\n"), "volumes: a team's pods mount only"},
		{"hostPort", pod("hostport", "  containers:\n  - name: app\n"+img+"    ports: [{containerPort: 8000, hostPort: 8000}]\n"), "Pod Security baseline: hostPort"},
		{"hostPID", pod("hostpid", "  hostPID: true\n"+app), "Pod Security baseline: host namespaces"},
		{"privileged, even a worker's main container", pod("privileged", "  containers:\n  - name: main\n"+img+"    securityContext: {privileged: true}\n"), "Pod Security baseline: privileged containers"},
		{"SYS_ADMIN, even a worker's main container", pod("sysadmin", "  containers:\n  - name: main\n"+img+"    securityContext: {capabilities: {add: [IPC_LOCK, SYS_ADMIN]}}\n"), "Pod Security baseline: non-default capabilities"},
		{"a worker's capabilities on another container", pod("caps", "  containers:\n  - name: app\n"+img+"    securityContext: {capabilities: {add: [IPC_LOCK]}}\n"), "Pod Security baseline: non-default capabilities"},
		{"seccomp Unconfined", pod("seccomp", "  securityContext: {seccompProfile: {type: Unconfined}}\n"+app), "seccompProfile Unconfined"},
		{"AppArmor Unconfined", pod("apparmor", "  containers:\n  - name: app\n"+img+"    securityContext: {appArmorProfile: {type: Unconfined}}\n"), "AppArmor profile Unconfined"},
		{"SELinux spc_t", pod("selinux", "  securityContext: {seLinuxOptions: {type: spc_t}}\n"+app), "seLinuxOptions"},
		{"an unsafe sysctl", pod("sysctl", "  securityContext: {sysctls: [{name: kernel.msgmax, value: '65536'}]}\n"+app), "sysctls outside the safe set"},
		{"a probe reaching another host", pod("probehost", "  containers:\n  - name: app\n"+img+"    livenessProbe: {httpGet: {host: 10.0.0.9, port: 80, path: /}}\n"), "probe or lifecycle host"},
		{"root with privilege escalation", pod("root", "  containers:\n  - name: app\n"+img+"    securityContext: {runAsUser: 0, allowPrivilegeEscalation: true}\n"), "runAsUser 0 (root)"},
		{"a priority class that preempts other teams", pod("priority", "  priorityClassName: system-node-critical\n"+app), "priorityClassName: not one of the site's priority classes"},
		{"every GPU of the node", pod("devices", "  containers:\n  - name: app\n"+img+"    env: [{name: NVIDIA_VISIBLE_DEVICES, value: all}]\n"), "env: NVIDIA_* and CUDA_VISIBLE_*"},
		{"the runtime's variables under a prefix", pod("envfrom", "  containers:\n  - name: app\n"+img+"    envFrom: [{prefix: NVIDIA_, configMapRef: {name: devices}}]\n"), "envFrom: only a Secret, with no prefix"},
		{"a node named directly", pod("nodename", "  nodeName: cpu-0\n"+app), "nodeName: a team's pod goes through the scheduler"},
		{"another ServiceAccount", pod("account", "  serviceAccountName: builder\n"+app), "serviceAccountName: a team's pods run as the namespace's default ServiceAccount"},
		// The exempt class is the workers': another pod taking it is refused, not exempted.
		{"the workers' RuntimeClass on a pod that is no worker", "apiVersion: v1\nkind: Pod\nmetadata: {name: notworker, namespace: " + ns + "}\nspec:\n  runtimeClassName: " + rackbox.WorkerRuntimeClass + "\n" + app, "runtimeClassName: nvidia, which Pod Security admission exempts, is the GPU workers' alone"},
		// Without the exempt RuntimeClass, Pod Security admission refuses at baseline first.
		{"hostPID without the workers' class", "apiVersion: v1\nkind: Pod\nmetadata: {name: plain-hostpid, namespace: " + ns + "}\nspec:\n  hostPID: true\n" + app, `violates PodSecurity "baseline:latest": host namespaces`},
		{"a worker's capabilities without the workers' class", "apiVersion: v1\nkind: Pod\nmetadata: {name: plain-caps, namespace: " + ns + "}\nspec:\n  containers:\n  - name: main\n" + img + "    securityContext: {capabilities: {add: [IPC_LOCK]}}\n", `violates PodSecurity "baseline:latest": non-default capabilities`},
	}
	// An account of the namespace that is neither its default nor the operator's.
	require.NoError(t, box.Client.Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "builder"}}))
	kubectl := filepath.Join(cluster.bin, "kubectl")
	for _, b := range bypasses {
		cmd := exec.Command(kubectl, "--kubeconfig", box.Kubeconfig, "apply", "-f", "-")
		cmd.Stdin = strings.NewReader(b.manifest)
		out, err := cmd.CombinedOutput()
		if assert.Error(t, err, "%s: kubectl apply succeeded:\n%s", b.name, out) {
			assert.Contains(t, string(out), b.refusal, "%s", b.name)
		}
	}
	var pods corev1.PodList
	require.NoError(t, box.Client.List(context.Background(), &pods, client.InNamespace(ns)))
	assert.Empty(t, pods.Items, "no bypass pod exists")

	// A graph setting a variable the operator writes is refused too, before any pod exists: in a
	// component's pod template, or for the whole graph.
	graph := func(name, spec string) string {
		return "apiVersion: nvidia.com/v1beta1\nkind: DynamoGraphDeployment\nmetadata: {name: " + name + ", namespace: " + ns + "}\nspec:\n  backendFramework: vllm\n" + spec
	}
	for _, g := range []struct{ name, manifest, refusal string }{
		{"a worker joining another team's graph", graph("join", "  components:\n  - name: Worker\n    type: worker\n    podTemplate:\n      spec:\n        containers:\n        - name: main\n          env: [{name: DYN_NAMESPACE, value: team-b-graph}]\n"), "components[].podTemplate"},
		{"the graph's own env", graph("genv", "  env: [{name: NVIDIA_VISIBLE_DEVICES, value: all}]\n  components:\n  - name: Frontend\n    type: frontend\n"), "spec.env: the graph sets a variable"},
		{"the global Dynamo namespace", graph("global", "  components:\n  - name: Frontend\n    type: frontend\n    globalDynamoNamespace: true\n"), "globalDynamoNamespace"},
	} {
		cmd := exec.Command(kubectl, "--kubeconfig", box.Kubeconfig, "apply", "-f", "-")
		cmd.Stdin = strings.NewReader(g.manifest)
		out, err := cmd.CombinedOutput()
		if assert.Error(t, err, "%s was admitted:\n%s", g.name, out) {
			assert.Contains(t, string(out), teamboundary.GraphPolicyName, g.name)
			assert.Contains(t, string(out), g.refusal, g.name)
		}
	}

	// The site's package resource reported what it installed.
	assert.Equal(t, teamboundary.PolicyName, boxSite.outputs.PodPolicy)
	assert.Equal(t, teamboundary.GraphPolicyName, boxSite.outputs.GraphPolicy)
	assert.Equal(t, []string{"box-guarded-a", "box-guarded-b", "box-guarded-c", "box-guarded-d"}, boxSite.outputs.Namespaces)

	// The stack's own pods: agg with its namespace from the site, the workers on the exempt class
	// (the default: rackbox.WorkerRuntimeClass is the GPU Operator's nvidia).
	readyBoxStack(t, "agg", ns, rackbox.NVL72("nvl72-team-a").WithGPUs(12), auto.ConfigMap{
		"minimax-m3:namespace.create": {Value: "false"},
	})
	running := podsOf(t, ns, client.MatchingLabels{graphLabelKey: aggGraph})
	require.NotEmpty(t, running)
	workers := 0
	for _, p := range running {
		assert.Equal(t, corev1.PodRunning, p.Status.Phase, "pod %s", p.Name)
		if p.Labels["nvidia.com/dynamo-component-type"] == "worker" {
			workers++
		}
	}
	assert.Equal(t, 3, workers, "the three workers, admitted by the policy with their exemption")

	// The graph's NetworkPolicy is in the cluster and selects exactly the graph's pods (the box
	// has no network plugin to enforce it; the unit tests check its rules).
	np := &networkingv1.NetworkPolicy{}
	require.NoError(t, box.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: aggGraph + "-isolation"}, np))
	selector, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
	require.NoError(t, err)
	var selected corev1.PodList
	require.NoError(t, box.Client.List(context.Background(), &selected, client.InNamespace(ns), client.MatchingLabelsSelector{Selector: selector}))
	assert.Len(t, selected.Items, len(running), "the policy isolates every pod of the graph")
}

// disagg with every option on, in a team namespace: the endpoint picker (the operator's own
// ServiceAccount), the workers' frontend sidecars, the monitors, the disruption budgets, the
// benchmark's ConfigMap and the smoke test's Job are all admitted, and the graph is Ready.
func TestBoxTeamNamespaceAdmitsDisaggWithEveryOption(t *testing.T) {
	parallelOnBox(t)
	rackBox(t)
	const ns = "box-guarded-d"
	installTeamBoundary(t, ns)
	readyBoxStack(t, "disagg", ns, rackbox.NVL72("nvl72-team-d").WithGPUs(24), auto.ConfigMap{
		"minimax-m3:namespace.create":              {Value: "false"},
		"minimax-m3:exposure.enabled":              {Value: "true"},
		"minimax-m3:exposure.backend":              {Value: "inferencePool"},
		"minimax-m3:exposure.gateway.namespace":    {Value: boxGatewayNamespace},
		"minimax-m3:exposure.gateway.name":         {Value: "inference"},
		"minimax-m3:exposure.gateway.sectionName":  {Value: "https"},
		"minimax-m3:exposure.hostname":             {Value: "team-d.box.example"},
		"minimax-m3:exposure.endpointPicker.image": {Value: "nvcr.io/nvidia/ai-dynamo/dynamo-frontend:1.4.0"},
		"minimax-m3:observability.enabled":         {Value: "true"},
		"minimax-m3:placement.disruptionBudget":    {Value: "true"},
		"minimax-m3:benchmark.enabled":             {Value: "true"},
	})
	running := podsOf(t, ns, client.MatchingLabels{graphLabelKey: disaggGraph})
	types := map[string]int{}
	for _, p := range running {
		assert.Equal(t, corev1.PodRunning, p.Status.Phase, "pod %s", p.Name)
		types[p.Labels["nvidia.com/dynamo-component-type"]]++
	}
	assert.Equal(t, 3, types["prefill"], "%v", types)
	assert.Equal(t, 3, types["decode"], "%v", types)
	assert.Equal(t, 1, types["frontend"], "%v", types)
	assert.Equal(t, 1, types["epp"], "the endpoint picker, on the operator's own ServiceAccount: %v", types)
}
