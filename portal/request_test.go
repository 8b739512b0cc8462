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

// A request may leave the namespace's Pod Security to the cluster or ask for baseline, never lower
// it to privileged.
func TestARequestMayNotLowerPodSecurity(t *testing.T) {
	r := NewRequest("agg", "agg-psa")
	for _, level := range []string{"", "baseline"} {
		r.Config.Namespace.PodSecurity = level
		assert.Empty(t, BindPodSecurity(&r), level)
	}
	r.Config.Namespace.PodSecurity = "privileged"
	ps := BindPodSecurity(&r)
	if assert.Len(t, ps, 1) {
		assert.Equal(t, "namespace.podSecurity", ps[0].Key)
	}
}
