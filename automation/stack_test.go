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
