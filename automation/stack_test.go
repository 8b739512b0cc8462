package automation

import (
	"context"
	"minimax-m3/internal/fakecli"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// version is the fake CLI's answer to `pulumi version`.
var version = fakecli.Reply{Args: "version", Stdout: "v3.276.0"}

// fakePulumi is a Pulumi CLI that answers `version` (or, with fail set, fails it) and fails
// everything else.
func fakePulumi(t *testing.T, fail bool) *fakecli.CLI {
	v := version
	if fail {
		v = fakecli.Reply{Args: "version", Stderr: "no CLI here", Exit: 1}
	}
	return fakecli.Install(t, fakecli.Reply{Stderr: "error: not here", Exit: 255}, v)
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
	assert.Equal(t, []string{"version", "version"}, failing.Calls(t), "a failed check is not kept")

	pulumiCLI.cmd = nil
	t.Cleanup(func() { pulumiCLI.cmd = nil })
	log := fakePulumi(t, false)
	require.Error(t, open(), "the fake CLI selects no stack")
	require.Error(t, open())
	var versions int
	for _, c := range log.Calls(t) {
		if c == "version" {
			versions++
		}
	}
	assert.Equal(t, 1, versions, "two stacks opened, one version check:\n%s", strings.Join(log.Calls(t), "\n"))
	assert.Greater(t, len(log.Calls(t)), 2, "each stack still ran its own commands")

	// A stack whose environment skips the check leaves it to the Automation API, as before.
	pulumiCLI.cmd = nil
	fakePulumi(t, false)
	_, err := SelectStack(ctx, Options{ProjectDir: t.TempDir(), Stack: "agg", EnvVars: map[string]string{skipVersionCheck: "true"}})
	require.Error(t, err)
	assert.Nil(t, pulumiCLI.cmd, "the shared CLI is neither made nor used")
}

// fakeStackCLI is a Pulumi CLI that selects any stack and answers `config` with one key no
// settings file holds.
func fakeStackCLI(t *testing.T) *fakecli.CLI {
	return fakecli.Install(t, fakecli.Reply{}, version,
		fakecli.Reply{Args: "config", Stdout: `{"minimax-m3:fromTheCLI": {"value": "1", "secret": false}}`})
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
		require.NotEmpty(t, log.Calls(t), "the stack was selected through the CLI")
		log.Reset(t)
		require.NoError(t, s.readKeys(ctx))
		ranConfig := strings.Contains(strings.Join(log.Calls(t), "\n"), "config")
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

	// The project file declares or sets only top-level keys, which the program reads whether the
	// stack sets them or not: the settings file still lists what the stack adds.
	keys, ranConfig = keysOf("config:\n  image:\n    type: string\n    default: \"\"\n  minimax-m3:worker: {}\n", "config:\n  minimax-m3:typo: \"1\"\n")
	assert.Equal(t, []string{"minimax-m3:typo"}, keys)
	assert.False(t, ranConfig, "no `pulumi config` run")

	for name, c := range map[string]struct{ project, settings string }{
		"the project file sets a key the program does not read": {"config:\n  minimax-m3:typo: x\n", "config:\n  minimax-m3:typo: \"1\"\n"},
		"an environment is imported":                            {"", "environment:\n  - team/agg\nconfig:\n  minimax-m3:typo: \"1\"\n"},
		"no settings file":                                      {"", ""},
	} {
		keys, ranConfig := keysOf(c.project, c.settings)
		assert.Equal(t, []string{"minimax-m3:fromTheCLI"}, keys, name)
		assert.True(t, ranConfig, name)
	}
}
