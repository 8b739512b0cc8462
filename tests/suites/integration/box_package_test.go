package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"minimax-m3/tests/framework/rackbox"
)

// TestBoxPackageFromYAML uses the Deployment as a Pulumi package from another language: a Pulumi
// YAML program (its language host is built from Go modules like the CLI) that brings its own
// Kubernetes provider and the token from its own config, deploying agg into the rack box through
// the real CLI, the real operator and controllers, to Ready.
//
// What the test cannot do here: `pulumi package add`. The CLI's package add ends by asking the
// program's language host to link the package (Link), which the YAML host v1.25 and the Go host
// v3.66 (the newest releases the module proxy serves) predate; so the program names the package
// in Pulumi.yaml's `packages:` as package add would. And the plugin is used built (a folder with
// its binary): the Go host v3.66 builds a source plugin only from its own working directory. The
// source-based package itself is checked with the CLI as a current host uses it: `pulumi package
// get-schema` of provider/ builds the plugin from source through the Go host and returns the
// committed schema.
func TestBoxPackageFromYAML(t *testing.T) {
	parallelOnBox(t)
	r := addRack(t, rackbox.NVL72("nvl72-package").WithGPUs(12))
	ns := "box-package"
	env := pulumiEnv(t)
	env["KUBECONFIG"] = rackBox(t).Kubeconfig

	// The plugin, as the Go language host builds it from provider/.
	plugin := packagePlugin(t)

	dir := t.TempDir()
	program := fmt.Sprintf(`name: m3-consumer
runtime: yaml
packages:
  minimax-m3: %s
config:
  hfToken:
    type: string
    secret: true
resources:
  # The program's own provider: the Deployment and everything under it use it.
  cluster:
    type: pulumi:providers:kubernetes
    properties:
      enableConfigMapMutable: true
      enableSecretMutable: true
  m3:
    type: minimax-m3:index:Deployment
    properties:
      profile: agg
      hfToken: ${hfToken}
      namespace:
        name: %s
      imageRegistries: [nvcr.io, docker.io, %s]
      modelDownload:
        timeout: 3m
      readiness:
        timeout: 3m
      placement:
        topologyKey: %s
      worker:
        scheduling:
          nodeSelector:
            %s: %s
    options:
      providers:
        - ${cluster}
outputs:
  frontendService: ${m3.frontendService}
  gpuCount: ${m3.gpuCount}
  smokeTest: ${m3.smokeTest}
`, plugin, ns, rackbox.Registry, rackbox.CliqueLabel, rackbox.RackLabel, r.Name)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), []byte(program), 0o644))

	log := &syncBuffer{}
	run := pulumiRunner(dir, env, log)
	_, err := run("stack", "init", "dev")
	require.NoError(t, err, log.String())
	_, err = run("config", "set", "--secret", "hfToken", testToken)
	require.NoError(t, err, log.String())
	t.Cleanup(func() { _, _ = run("destroy", "--yes", "--skip-preview") })

	// A bad input is refused at preview, named by its key, before anything is registered.
	bad := strings.Replace(program, "      worker:\n", "      worker:\n        replicas: 0\n", 1)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), []byte(bad), 0o644))
	out2, err := run("preview")
	require.Error(t, err, out2)
	assert.Contains(t, out2, "worker.replicas: must be at least 1")
	assert.NotContains(t, out2, "kubernetes:", "nothing of the Deployment was registered")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), []byte(program), 0o644))

	out2, err = run("up", "--yes", "--skip-preview")
	require.NoError(t, err, out2)
	g, ok := getOn(t, box.Client, graphGVK, ns, aggGraph)
	require.True(t, ok, "the graph exists")
	assert.True(t, operatorReady(g), "the operator says the graph is Ready")

	outputs, err := run("stack", "output", "--json", "--show-secrets")
	require.NoError(t, err, outputs)
	var o struct {
		FrontendService string         `json:"frontendService"`
		GPUCount        float64        `json:"gpuCount"`
		SmokeTest       map[string]any `json:"smokeTest"`
	}
	require.NoError(t, json.Unmarshal([]byte(outputs), &o), outputs)
	assert.Equal(t, aggGraph+"-frontend", o.FrontendService)
	assert.Equal(t, 12.0, o.GPUCount)
	assert.Equal(t, 200.0, o.SmokeTest["status"], "the smoke test ran once the graph was Ready: %v", o.SmokeTest)

	// One Kubernetes provider in the state, the program's: the component made none of its own,
	// and every Kubernetes object of the Deployment uses the program's.
	state, err := run("stack", "export")
	require.NoError(t, err, state)
	var deployment struct {
		Deployment struct {
			Resources []struct {
				URN, Type, Provider string
			} `json:"resources"`
		} `json:"deployment"`
	}
	require.NoError(t, json.Unmarshal([]byte(state), &deployment))
	var providers, objects []string
	for _, res := range deployment.Deployment.Resources {
		switch {
		case res.Type == "pulumi:providers:kubernetes":
			providers = append(providers, res.URN)
		case strings.HasPrefix(res.Type, "kubernetes:"):
			objects = append(objects, res.Provider)
		}
	}
	require.Len(t, providers, 1, "only the program's provider")
	assert.True(t, strings.HasSuffix(providers[0], "::cluster"), providers[0])
	require.NotEmpty(t, objects)
	for _, p := range objects {
		assert.True(t, strings.HasPrefix(p, providers[0]+"::"), "every object uses the program's provider: %s", p)
	}
	assert.NotContains(t, state, testToken, "the token is a secret in the state")

	// A second up of the same program changes nothing.
	out2, err = run("preview", "--expect-no-changes")
	require.NoError(t, err, out2)

	// The source-based package: the Go language host builds provider/ and serves the schema
	// committed beside it.
	src := t.TempDir()
	copyProgramInto(t, src)
	for _, p := range []string{"pulumipackage", "teamboundary", "provider"} {
		out, err := exec.Command("cp", "-r", filepath.Join(cluster.root, p), src).CombinedOutput()
		require.NoError(t, err, string(out))
	}
	getSchema := exec.Command("pulumi", "package", "get-schema", ".")
	getSchema.Dir = filepath.Join(src, "provider") // the v3.66 Go host builds from its working directory
	getSchema.Env = os.Environ()
	for k, v := range env {
		getSchema.Env = append(getSchema.Env, k+"="+v)
	}
	schema, err := getSchema.Output()
	require.NoError(t, err)
	committed, err := os.ReadFile(filepath.Join(cluster.root, "provider", "schema.json"))
	require.NoError(t, err)
	var got, want map[string]any
	require.NoError(t, json.Unmarshal(schema, &got), string(schema))
	require.NoError(t, json.Unmarshal(committed, &want))
	// The CLI fills in what the schema leaves empty (config); what the package declares is the same.
	for _, k := range []string{"name", "version", "resources", "types"} {
		assert.Equal(t, toJSON(t, want[k]), toJSON(t, got[k]), "the plugin built from source serves the committed schema's %s", k)
	}

	// destroy removes the graph and everything but the kept cache claim.
	out2, err = run("destroy", "--yes", "--skip-preview")
	require.NoError(t, err, out2)
	_, ok = getOn(t, box.Client, graphGVK, ns, aggGraph)
	assert.False(t, ok, "destroy removed the graph")
}

// packagePlugin is the package's plugin, built once for the suite as the Go language host builds
// it from provider/: the folder that holds it.
func packagePlugin(t *testing.T) string {
	t.Helper()
	dir, err := packagePluginBuilt()
	require.NoError(t, err)
	return dir
}

// packagePluginBuilt is packagePlugin off any test.
func packagePluginBuilt() (string, error) {
	out, err := buildOnceErr(filepath.Join("package", "pulumi-resource-minimax-m3"), func(out string) (*exec.Cmd, error) {
		cmd := exec.Command("go", "build", "-o", out, "./provider")
		cmd.Dir = cluster.root
		return cmd, os.MkdirAll(filepath.Dir(out), 0o755)
	})
	return filepath.Dir(out), err
}

// pulumiRunner runs the real CLI on the program in dir with env, non-interactive, writing its
// output to log too; the Go language host builds with the test's Go settings.
func pulumiRunner(dir string, env map[string]string, log *syncBuffer) func(args ...string) (string, error) {
	return func(args ...string) (string, error) {
		cmd := exec.Command("pulumi", append(args, "--cwd", dir, "--non-interactive")...)
		for k, v := range env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		for _, k := range []string{"HOME", "GOFLAGS", "GOCACHE", "GOMODCACHE", "GOPATH", "GOPROXY", "GOTOOLCHAIN"} {
			if v, ok := os.LookupEnv(k); ok {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
		}
		out, err := cmd.CombinedOutput()
		_, _ = log.Write(out)
		return string(out), err
	}
}
