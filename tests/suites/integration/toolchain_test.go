package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// `make local` builds only what it runs: the Makefile's local, integration, pr-check and bench
// targets build the toolchain's runtime half (tools/build.sh runtime), and that half, run on a
// toolchain cache holding every tool but the linters, builds nothing and links no linter. The
// runtime tools come from the suite's own cache (make integration built them before the suite
// ran), linked file by file into a new cache beside a copy of tools/, so nothing of the suite's
// toolchain changes: the test then checks that the suite's Go language host is untouched.
func TestMakeLocalBuildsOnlyWhatItRuns(t *testing.T) {
	parallel(t)
	for _, target := range []string{"local", "integration", "pr-check", "bench", "check"} {
		cmd := exec.Command("make", "-n", target, "BASE=main")
		cmd.Dir = cluster.root
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, string(out))
		want, not := "bash tools/build.sh runtime", "bash tools/build.sh linters"
		if target == "check" {
			want, not = not, want
		}
		assert.Contains(t, string(out), want, target)
		assert.NotContains(t, string(out), not, target)
		assert.NotRegexp(t, `bash tools/build.sh\s*\n`, string(out), "%s builds the whole toolchain", target)
	}

	root := t.TempDir()
	for _, p := range []string{"tools", "go.mod"} {
		out, err := exec.Command("cp", "-r", filepath.Join(cluster.root, p), root).CombinedOutput()
		require.NoError(t, err, string(out))
	}
	cache := os.Getenv("MINIMAX_M3_TOOLCHAIN_CACHE")
	if cache == "" {
		home, err := os.UserCacheDir()
		require.NoError(t, err)
		cache = filepath.Join(home, "minimax-m3", "toolchain")
	}
	entries, err := os.ReadDir(cache)
	require.NoError(t, err)
	runtimeOnly := filepath.Join(t.TempDir(), "toolchain")
	require.NoError(t, os.Mkdir(runtimeOnly, 0o755))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "golangci-lint-") || strings.HasPrefix(e.Name(), "actionlint-") {
			continue
		}
		// A folder of links, never a link to the folder: the script installs wrappers into the
		// CLI's folder (the Go language host's, the YAML host's link), which must land in this
		// cache, not in the suite's.
		from, to := filepath.Join(cache, e.Name()), filepath.Join(runtimeOnly, e.Name())
		if !e.IsDir() {
			require.NoError(t, os.Symlink(from, to))
			continue
		}
		require.NoError(t, os.Mkdir(to, 0o755))
		files, err := os.ReadDir(from)
		require.NoError(t, err)
		for _, f := range files {
			require.NoError(t, os.Symlink(filepath.Join(from, f.Name()), filepath.Join(to, f.Name())))
		}
	}
	reference := func(env, dir string) string {
		if v := os.Getenv(env); v != "" {
			return v
		}
		return filepath.Join(cluster.root, "..", "shared", "reference", dir)
	}
	cmd := exec.Command("bash", filepath.Join(root, "tools", "build.sh"), "runtime")
	cmd.Env = append(os.Environ(), "MINIMAX_M3_TOOLCHAIN_CACHE="+runtimeOnly, "PULUMI_HOME="+filepath.Join(root, ".toolchain", "pulumi-home"),
		"MINIMAX_M3_DYNAMO_OPERATOR="+reference("MINIMAX_M3_DYNAMO_OPERATOR", "dynamo-operator"),
		"MINIMAX_M3_GOPROXY_EXTRA="+reference("MINIMAX_M3_GOPROXY_EXTRA", "goproxy"),
		"MINIMAX_M3_DRA_DRIVER="+reference("MINIMAX_M3_DRA_DRIVER", "dra-driver-nvidia-gpu"))
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	assert.Contains(t, string(out), "toolchain: ready in")
	assert.NotContains(t, string(out), "building", "every runtime tool was in the cache: nothing built")
	linked, err := os.ReadDir(filepath.Join(root, ".toolchain", "bin"))
	require.NoError(t, err)
	var names []string
	for _, e := range linked {
		names = append(names, e.Name())
	}
	for _, tool := range []string{"pulumi", "kube-apiserver", "etcd", "kube-controller-manager", "kube-scheduler", "kwok", "dynamo-operator", "compute-domain-controller"} {
		assert.Contains(t, names, tool)
	}
	assert.NotContains(t, names, "golangci-lint")
	assert.NotContains(t, names, "actionlint")

	// The suite's own toolchain still runs its own language host.
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "pulumi-v") {
			wrapper, err := os.ReadFile(filepath.Join(cache, e.Name(), "pulumi-language-go"))
			require.NoError(t, err)
			assert.NotContains(t, string(wrapper), runtimeOnly, "the suite's Go language host wrapper was rewritten")
			assert.Contains(t, string(wrapper), cache)
		}
	}
}
