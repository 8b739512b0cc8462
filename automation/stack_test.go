package automation

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Pulumi CLI on PATH that logs its arguments, answers `version`, and fails everything else (or,
// with fail set, `version` too).
func fakePulumi(t *testing.T, fail bool) (logFile string) {
	t.Helper()
	dir := t.TempDir()
	logFile = filepath.Join(dir, "calls")
	version := `echo v3.276.0`
	if fail {
		version = `echo "no CLI here" >&2; exit 1`
	}
	script := "#!/bin/sh\necho \"$*\" >> " + logFile + "\nif [ \"$1\" = version ]; then " + version + "; exit 0; fi\necho \"error: not here\" >&2\nexit 255\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pulumi"), []byte(script), 0o755))
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return logFile
}

func calls(t *testing.T, logFile string) []string {
	t.Helper()
	b, err := os.ReadFile(logFile)
	require.NoError(t, err)
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

// The CLI's version is checked once per process, not once per stack a portal opens; a failed check
// is tried again by the next stack.
func TestTheCLIIsCheckedOncePerProcess(t *testing.T) {
	ctx := context.Background()
	open := func() error {
		_, err := SelectStack(ctx, Options{ProjectDir: t.TempDir(), Stack: "agg"})
		return err
	}

	pulumiCLI.cmd = nil
	failing := fakePulumi(t, true)
	require.ErrorContains(t, open(), "stack agg")
	require.Error(t, open())
	assert.Equal(t, []string{"version", "version"}, calls(t, failing), "a failed check is not kept")

	pulumiCLI.cmd = nil
	t.Cleanup(func() { pulumiCLI.cmd = nil })
	log := fakePulumi(t, false)
	require.Error(t, open(), "the fake CLI selects no stack")
	require.Error(t, open())
	var versions int
	for _, c := range calls(t, log) {
		if c == "version" {
			versions++
		}
	}
	assert.Equal(t, 1, versions, "two stacks opened, one version check:\n%s", strings.Join(calls(t, log), "\n"))
	assert.Greater(t, len(calls(t, log)), 2, "each stack still ran its own commands")

	// A stack whose environment skips the check leaves it to the Automation API, as before.
	pulumiCLI.cmd = nil
	fakePulumi(t, false)
	_, err := SelectStack(ctx, Options{ProjectDir: t.TempDir(), Stack: "agg", EnvVars: map[string]string{skipVersionCheck: "true"}})
	require.Error(t, err)
	assert.Nil(t, pulumiCLI.cmd, "the shared CLI is neither made nor used")
}

// A Pulumi CLI on PATH that logs its arguments, selects any stack, and answers `config` with one
// key no settings file holds.
func fakeStackCLI(t *testing.T) (logFile string) {
	t.Helper()
	dir := t.TempDir()
	logFile = filepath.Join(dir, "calls")
	script := `#!/bin/sh
echo "$*" >> ` + logFile + `
case " $* " in
*" version "*) echo v3.276.0 ;;
*" config "*) echo '{"minimax-m3:fromTheCLI": {"value": "1", "secret": false}}' ;;
esac
exit 0
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pulumi"), []byte(script), 0o755))
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return logFile
}

// The program is handed the keys of the stack's settings file, read without a CLI run (or any
// secret decrypted); when the project file or an environment adds config, or there is no settings
// file, the CLI's `pulumi config` lists them.
func TestConfigKeysAreReadFromTheStackSettingsFile(t *testing.T) {
	ctx := context.Background()
	pulumiCLI.cmd = nil
	t.Cleanup(func() { pulumiCLI.cmd = nil })
	log := fakeStackCLI(t)
	keysOf := func(project, settings string) ([]string, bool) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), []byte("name: minimax-m3\nruntime: go\n"+project), 0o600))
		if settings != "" {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "Pulumi.agg.yaml"), []byte(settings), 0o600))
		}
		s, err := SelectStack(ctx, Options{ProjectDir: dir, Stack: "agg"})
		require.NoError(t, err)
		require.NoError(t, os.Remove(log))
		require.NoError(t, s.readKeys(ctx))
		b, err := os.ReadFile(log)
		ranConfig := err == nil && strings.Contains(string(b), "config")
		return s.keys.get(), ranConfig
	}

	keys, ranConfig := keysOf("", `encryptionsalt: v1:abc
config:
  minimax-m3:namespace:
    name: inference
  minimax-m3:hfToken:
    secure: v1:AAAA
  minimax-m3:typo: "1"
`)
	assert.Equal(t, []string{"minimax-m3:hfToken", "minimax-m3:namespace", "minimax-m3:typo"}, keys)
	assert.False(t, ranConfig, "no `pulumi config` run")

	for name, c := range map[string]struct{ project, settings string }{
		"the project file sets config": {"config:\n  minimax-m3:image: x\n", "config:\n  minimax-m3:typo: \"1\"\n"},
		"an environment is imported":   {"", "environment:\n  - team/agg\nconfig:\n  minimax-m3:typo: \"1\"\n"},
		"no settings file":             {"", ""},
	} {
		keys, ranConfig := keysOf(c.project, c.settings)
		assert.Equal(t, []string{"minimax-m3:fromTheCLI"}, keys, name)
		assert.True(t, ranConfig, name)
	}
}
