package config

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Worker roles roll one pod at a time with no surge unless told otherwise; the frontend keeps the
// operator's default; every form the operator reads is one setting away.
func TestRolloutDefaultsNeedNoSpareGPU(t *testing.T) {
	for _, p := range []string{"agg", "disagg"} {
		c, err := Parse(valid(p))
		require.NoError(t, err)
		for _, r := range c.Workers() {
			surge, unavailable := r.Config.Rollout.Surge(r.Config.Replicas)
			assert.Equal(t, []int{0, 1}, []int{surge, unavailable}, "%s %s", p, r.Key)
			assert.Equal(t, map[string]string{StrategyAnnotation: "RollingUpdate", MaxSurgeAnnotation: "0", MaxUnavailableAnnotation: "1"}, r.Config.Rollout.Annotations())
		}
		assert.Nil(t, c.Frontend.Rollout.Annotations(), "the frontend keeps the operator's default")
	}
	c, err := Parse(with(valid("agg"), "worker", `{"rollout": {"strategy": "OperatorDefault"}}`))
	require.NoError(t, err)
	assert.Nil(t, c.Worker.Rollout.Annotations(), "the recipe's form writes no annotation")
	surge, unavailable := c.Worker.Rollout.Surge(3)
	assert.Equal(t, []int{1, 0}, []int{surge, unavailable}, "the operator's 25%/25% of 3: one extra worker, none down first")

	c, err = Parse(with(valid("agg"), "worker", `{"rollout": {"strategy": "Recreate"}}`))
	require.NoError(t, err)
	assert.Equal(t, map[string]string{StrategyAnnotation: "Recreate"}, c.Worker.Rollout.Annotations())

	c, err = Parse(with(valid("agg"), "worker", `{"rollout": {"maxUnavailable": "100%"}}`))
	require.NoError(t, err)
	surge, unavailable = c.Worker.Rollout.Surge(3)
	assert.Equal(t, []int{0, 3}, []int{surge, unavailable})
}

func TestRolloutValidationNamesTheKey(t *testing.T) {
	for value, want := range map[string]string{
		`{"rollout": {"strategy": "BlueGreen"}}`:                             "minimax-m3:worker.rollout.strategy",
		`{"rollout": {"maxSurge": "many"}}`:                                  "minimax-m3:worker.rollout.maxSurge",
		`{"rollout": {"maxUnavailable": "120%"}}`:                            "minimax-m3:worker.rollout.maxUnavailable",
		`{"rollout": {"maxUnavailable": "25%"}}`:                             "minimax-m3:worker.rollout.maxUnavailable: 25% with minimax-m3:worker.rollout.maxSurge 0 comes to 0 of 3 replicas",
		`{"rollout": {"strategy": "Recreate", "maxUnavailable": "1"}}`:       "minimax-m3:worker.rollout.maxUnavailable: applies only to strategy RollingUpdate",
		`{"podAnnotations": {"nvidia.com/deployment-strategy": "Recreate"}}`: "minimax-m3:worker.podAnnotations.nvidia.com/deployment-strategy: set minimax-m3:worker.rollout instead",
	} {
		_, err := Parse(with(valid("agg"), "worker", value))
		require.Error(t, err, value)
		assert.Contains(t, err.Error(), want, value)
	}
}
