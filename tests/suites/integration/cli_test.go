package integration

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"minimax-m3/automation"
	"minimax-m3/policy"
)

// copyProgram copies what `pulumi preview` builds, the Go module and the stack files, with no
// program built: the CLI's first run builds it, as in a fresh clone.
func copyProgram(t *testing.T) string {
	dir := t.TempDir()
	copySourceInto(t, dir)
	require.NoError(t, automation.CopyProject(cluster.root, dir))
	return dir
}

// The way users run it: the plain CLI, building the program through the Go language host.
func TestPlainCLIPreviewOfBothStacks(t *testing.T) {
	parallel(t)
	dir := copyProgram(t)
	env := os.Environ()
	for k, v := range pulumiEnv(t) {
		env = append(env, k+"="+v)
	}
	// --event-log is a debug command's flag.
	env = append(env, "PULUMI_DEBUG_COMMANDS=true")
	pulumi := func(args ...string) string {
		cmd := exec.Command("pulumi", append(args, "--cwd", dir, "--non-interactive")...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "pulumi %s:\n%s", strings.Join(args, " "), out)
		return string(out)
	}
	for _, stack := range []string{"agg", "disagg"} {
		pulumi("stack", "init", stack)
		pulumi("config", "set", "--stack", stack, "--path", "minimax-m3:namespace.name", "cli-"+stack)
		pulumi("config", "set", "--stack", stack, "--secret", "minimax-m3:hfToken", testToken)
		events := filepath.Join(t.TempDir(), stack+".events")
		out := pulumi("preview", "--stack", stack, "--diff", "--event-log", events)
		for _, want := range []string{"kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment", "kubernetes:resource.nvidia.com/v1beta1:ComputeDomain",
			"kubernetes:batch/v1:Job", "kubernetes:core/v1:PersistentVolumeClaim", "kubernetes:core/v1:ConfigMap", "minimax-m3:index:Deployment"} {
			assert.Contains(t, out, want, stack)
		}
		assert.NotContains(t, out, testToken, "the preview diff shows no token")
		assert.NotContains(t, out, "from $PATH", "the plugins come from the toolchain's PULUMI_HOME and beside the CLI")

		// The policies over the preview's event log, as the PR workflow runs them.
		policyCmd := exec.Command("go", "run", "./cmd/policy", "-stack", stack, "-project", dir, "-events", events)
		policyCmd.Dir = cluster.root
		b, err := policyCmd.CombinedOutput()
		require.NoError(t, err, string(b))
		assert.Contains(t, string(b), fmt.Sprintf("%s: %d rules", events, len(policy.Rules)))
		assert.Contains(t, string(b), "no violations")
	}

	// A key the program does not know, and a value of the wrong type, fail preview at their key.
	pulumi("config", "set", "--stack", "agg", "minimax-m3:workers.replicas", "2")
	pulumi("config", "set", "--stack", "agg", "--path", "minimax-m3:worker.vllm.maxNumSeqs", "lots")
	cmd := exec.Command("pulumi", "preview", "--stack", "agg", "--cwd", dir, "--non-interactive")
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	require.Error(t, err, string(out))
	assert.Contains(t, string(out), "minimax-m3:workers.replicas: unknown key")
	assert.Contains(t, string(out), `minimax-m3:worker.vllm.maxNumSeqs: must be a whole number, got "lots"`)
}

// `pulumi new` from the project as a template (Pulumi.yaml's template:) makes a stack that
// previews: its questions (namespace, storage class; --yes takes -c answers) land as keys set
// without --path, which the program reads as the paths they spell, and `pulumi config` lists every
// declared key with its default. What is played: the new project's dependency install ends in an
// attempt to download a plugin the Go SDK's modules advertise (cloud-sdk), which no offline machine
// can; the stack and its config are made before it, so the test goes on from there when that
// download is the only failure.
func TestPulumiNewFromTheTemplateMakesAStackThatPreviews(t *testing.T) {
	parallel(t)
	template := copyProgram(t)
	dir := t.TempDir()
	env := os.Environ()
	for k, v := range pulumiEnv(t) {
		env = append(env, k+"="+v)
	}
	run := func(args ...string) (string, error) {
		cmd := exec.Command("pulumi", append(args, "--non-interactive")...)
		cmd.Env, cmd.Dir = env, dir
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("new", template, "--yes", "--stack", "site", "--name", "minimax-m3",
		"-c", "minimax-m3:namespace.name=team-new", "-c", "minimax-m3:modelCache.storageClass=rwx-fast")
	if err != nil {
		// The last error the CLI prints is the install's, and nothing else failed.
		errs := regexp.MustCompile(`error: .*`).FindAllString(out, -1)
		require.NotEmpty(t, errs, out)
		require.Regexp(t, `^error: installing packages: failed to download plugin: cloud-sdk-[0-9.]+: failed all 5 attempts$`, errs[len(errs)-1],
			"only the offline plugin download may fail:\n%s", out)
	}
	out, err = run("config", "set", "--secret", "minimax-m3:hfToken", testToken)
	require.NoError(t, err, out)
	out, err = run("config", "--json")
	require.NoError(t, err, out)
	for _, k := range []string{"minimax-m3:graphName", "minimax-m3:worker", "minimax-m3:readiness", "minimax-m3:namespace.name", "minimax-m3:profile"} {
		assert.Contains(t, out, `"`+k+`"`, "pulumi config lists %s", k)
	}
	out, err = run("preview", "--diff")
	require.NoError(t, err, out)
	assert.Contains(t, out, "team-new", "the namespace the template asked for")
	assert.Contains(t, out, "rwx-fast", "the storage class it asked for")
	assert.Contains(t, out, "kubernetes:nvidia.com/v1beta1:DynamoGraphDeployment")
}

// Render for GitOps review: every object as YAML with no cluster, then a server-side dry run of
// the files against the real CRDs. The disagg stack renders with exposure (to an InferencePool)
// and observability on, and its dry run is in the rack box, which serves their CRDs.
func TestRenderedManifestsPassAServerSideDryRun(t *testing.T) {
	parallelOnBox(t)
	for _, stack := range []string{"agg", "disagg"} {
		t.Run(stack, func(t *testing.T) {
			ns := "render-" + stack
			out := filepath.Join(t.TempDir(), "manifests")
			set := auto.ConfigMap{"minimax-m3:namespace.name": {Value: ns}}
			kubeconfig, kube := cluster.kubeconfig, cluster.client
			if stack == "disagg" {
				maps.Copy(set, auto.ConfigMap{
					"minimax-m3:exposure.enabled": {Value: "true"}, "minimax-m3:exposure.backend": {Value: "inferencePool"},
					"minimax-m3:exposure.gateway.namespace": {Value: "gateways"}, "minimax-m3:exposure.gateway.name": {Value: "shared"},
					"minimax-m3:exposure.gateway.sectionName": {Value: "https"}, "minimax-m3:exposure.hostname": {Value: "render.example.com"},
					"minimax-m3:exposure.endpointPicker.image":   {Value: "nvcr.io/nvidia/ai-dynamo/dynamo-frontend:1.4.0"},
					"minimax-m3:observability.enabled":           {Value: "true"},
					"minimax-m3:observability.dashboard.enabled": {Value: "false"},
				})
				b := rackBox(t)
				kubeconfig, kube = b.Kubeconfig, b.Client
			}
			err := automation.Render(context.Background(), automation.RenderOptions{ProjectDir: cluster.root, Stack: stack, OutDir: out, Config: set})
			require.NoError(t, err)
			files, err := filepath.Glob(filepath.Join(out, "1-manifest", "*.yaml"))
			require.NoError(t, err)
			var kinds []string
			for _, f := range files {
				b, err := os.ReadFile(f)
				require.NoError(t, err)
				for _, line := range strings.Split(string(b), "\n") {
					if strings.HasPrefix(line, "kind: ") {
						kinds = append(kinds, strings.TrimPrefix(line, "kind: "))
					}
				}
			}
			want := []string{"Namespace", "PersistentVolumeClaim", "Job", "ComputeDomain", "ConfigMap", "DynamoGraphDeployment", "Job", "NetworkPolicy"}
			for range workerRoles(stack) {
				want = append(want, "PodDisruptionBudget")
			}
			if stack == "disagg" {
				// The route, and monitors of the frontend, the workers and their frontend sidecars.
				want = append(want, "HTTPRoute", "PodMonitor", "PodMonitor", "PodMonitor", "PrometheusRule")
			}
			assert.ElementsMatch(t, want, kinds, "without HF_TOKEN no Secret is rendered; the second Job is the smoke test; a budget per worker role; the graph's NetworkPolicy")

			// A dry run of namespaced objects needs their namespace to exist.
			require.NoError(t, kube.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
			cmd := exec.Command("kubectl", "--kubeconfig", kubeconfig, "apply", "--server-side", "--dry-run=server", "-f", filepath.Join(out, "1-manifest"))
			b, err := cmd.CombinedOutput()
			require.NoError(t, err, string(b))
			assert.Contains(t, string(b), "dynamographdeployment.nvidia.com/minimax-m3-"+stack+"-gb200-agentic serverside-applied (server dry run)")
		})
	}
}
