package automation

import (
	"context"
	"strings"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"minimax-m3/internal/fakecli"
)

// A stack's outputs (which the Automation API reads after every up) are read with one CLI run,
// nothing decrypted, unless one of them is secret: then as the Automation API reads them, a second
// time with --show-secrets, each secret one marked so.
func TestOutputsAreReadOnceUnlessOneIsSecret(t *testing.T) {
	ctx := context.Background()
	for name, c := range map[string]struct {
		plain, revealed string
		want            auto.OutputMap
		runs            []string
	}{
		"no secret output": {
			plain: `{"namespace": "inference", "frontend": {"port": 8000}}`,
			want: auto.OutputMap{
				"namespace": {Value: "inference"},
				"frontend":  {Value: map[string]any{"port": float64(8000)}},
			},
			runs: []string{"stack output --json --stack agg --non-interactive"},
		},
		"a secret output, nested": {
			plain:    `{"namespace": "inference", "smokeTest": {"token": "[secret]"}}`,
			revealed: `{"namespace": "inference", "smokeTest": {"token": "hf_x"}}`,
			want: auto.OutputMap{
				"namespace": {Value: "inference"},
				"smokeTest": {Value: map[string]any{"token": "hf_x"}, Secret: true},
			},
			runs: []string{
				"stack output --json --stack agg --non-interactive",
				"stack output --json --stack agg",
				"stack output --json --show-secrets --stack agg",
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			pulumiCLI.cmd = nil
			t.Cleanup(func() { pulumiCLI.cmd = nil })
			log := fakecli.Install(t, fakecli.Reply{}, version,
				fakecli.Reply{Args: "stack output --json --show-secrets", Stdout: c.revealed},
				fakecli.Reply{Args: "stack output --json", Stdout: c.plain})
			s, err := SelectStack(ctx, Options{ProjectDir: t.TempDir(), Stack: "agg"})
			require.NoError(t, err)
			log.Reset(t)

			got, err := s.Outputs(ctx)
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
			var runs []string
			for _, call := range log.Calls(t) {
				// The Automation API's own runs start with its global flags.
				runs = append(runs, strings.TrimPrefix(call, "--non-interactive "))
			}
			assert.Equal(t, c.runs, runs)
		})
	}
}

// `pulumi cancel` runs on the wrapped workspace as the Automation API's own Stack.Cancel would on
// its LocalWorkspace, and a failure carries the CLI's message.
func TestCancelRunsTheCLI(t *testing.T) {
	ctx := context.Background()
	pulumiCLI.cmd = nil
	t.Cleanup(func() { pulumiCLI.cmd = nil })
	log := fakecli.Install(t, fakecli.Reply{}, version, fakecli.Reply{Args: "cancel", Stderr: "error: no update in progress", Exit: 255})
	s, err := SelectStack(ctx, Options{ProjectDir: t.TempDir(), Stack: "agg", EnvVars: map[string]string{"PULUMI_BACKEND_URL": "file:///state"}})
	require.NoError(t, err)
	log.Reset(t)

	err = s.Cancel(ctx)
	require.ErrorContains(t, err, "failed to cancel update")
	assert.ErrorContains(t, err, "no update in progress")
	assert.Equal(t, []string{"cancel --yes --stack agg --non-interactive"}, log.Calls(t))
	assert.Equal(t, "file:///state", log.Env(t)["PULUMI_BACKEND_URL"], "with the stack's environment")
}
