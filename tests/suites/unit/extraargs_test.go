package unit

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// extraArgs may add a flag, never repeat one the program writes: argparse keeps the last, so the
// typed value (and what the policies and the PR check read) would not be what runs.
func TestExtraArgsThatRepeatAWrittenFlagAreRefusedAtTheirKey(t *testing.T) {
	for _, tc := range []struct {
		stack, key, value, want string
	}{
		{"agg", "minimax-m3:worker", `{"extraArgs": ["--enable-log-requests", "--max-num-seqs", "64"]}`, "minimax-m3:worker.extraArgs[1]: --max-num-seqs repeats a flag"},
		{"agg", "minimax-m3:worker", `{"extraArgs": ["--max_num_batched_tokens=8192"]}`, "minimax-m3:worker.extraArgs[0]: --max_num_batched_tokens repeats a flag"},
		{"agg", "minimax-m3:worker", `{"extraArgs": ["--no-enable-prefix-caching"]}`, "minimax-m3:worker.extraArgs[0]: --no-enable-prefix-caching repeats a flag"},
		{"disagg", "minimax-m3:decodeWorker", `{"extraArgs": ["--disaggregation-mode", "prefill"]}`, "minimax-m3:decodeWorker.extraArgs[0]: --disaggregation-mode repeats a flag"},
		{"agg", "minimax-m3:frontend", `{"extraArgs": ["--router-mode=random"]}`, "minimax-m3:frontend.extraArgs[0]: --router-mode repeats a flag"},
	} {
		r, err := run(t, tc.stack, map[string]string{tc.key: tc.value})
		require.Error(t, err, tc.value)
		assert.Contains(t, err.Error(), tc.want)
		assert.Empty(t, r.resources, "nothing is registered")
	}
	// A flag the program does not write passes, on every role; so does the very same switch again
	// (copied from the recipe, it changes nothing).
	_, err := run(t, "disagg", map[string]string{
		"minimax-m3:prefillWorker": `{"extraArgs": ["--enable-log-requests", "--trust-remote-code"]}`,
		"minimax-m3:frontend":      `{"extraArgs": ["--namespace-prefix", "x"]}`,
	})
	require.NoError(t, err)
}
