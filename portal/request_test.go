package portal

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// A request is checked by the program's own rules before anything runs, those the program applies
// to what it writes included: an extra flag that repeats one it sets is refused at its key.
func TestARequestRepeatingAWrittenFlagIsRefusedAtItsKey(t *testing.T) {
	r := NewRequest("agg", "agg-flags")
	r.Config.Namespace.Name = "team-a"
	r.HFToken = "hf_request_test"
	assert.Empty(t, r.Validate())
	r.Config.Worker.ExtraArgs = []string{"--max-num-seqs", "64"}
	ps := r.Validate()
	if assert.Len(t, ps, 1) {
		assert.Equal(t, "worker.extraArgs[0]", ps[0].Key)
		assert.Contains(t, ps[0].Message, "repeats a flag the program already sets")
	}
}
