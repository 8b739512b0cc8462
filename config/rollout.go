package config

import (
	"fmt"
	"math"
	"reflect"
	"strconv"
	"strings"
)

// The Dynamo operator's deployment-strategy annotations. It reads them from a component's pod
// template annotations (deployment_strategy.go and getResourceAnnotations in its controller), for
// the Deployment it writes per component and for its own worker rollout
// (dgd_worker_rollout_reconciler.go: resolveRollingUpdateParams). Absent, it rolls with 25% surge
// and 25% unavailable.
const (
	StrategyAnnotation       = "nvidia.com/deployment-strategy"
	MaxSurgeAnnotation       = "nvidia.com/deployment-rolling-update-max-surge"
	MaxUnavailableAnnotation = "nvidia.com/deployment-rolling-update-max-unavailable"
)

// The rollout strategies of a role.
const (
	// RollingUpdate replaces pods a few at a time, within maxSurge and maxUnavailable.
	RollingUpdate = "RollingUpdate"
	// Recreate stops every pod of the role before the new ones start.
	Recreate = "Recreate"
	// OperatorDefault writes no annotation: the operator's 25% surge / 25% unavailable, the
	// recipe's form (no restart when adopting a recipe deployment).
	OperatorDefault = "OperatorDefault"
)

// Rollout is how the Dynamo operator replaces a role's pods when its spec changes (a flag, the
// image, a checksum, a restart).
type Rollout struct {
	Strategy string `json:"strategy"`
	// MaxSurge and MaxUnavailable (an integer or a percentage of replicas) apply to RollingUpdate;
	// empty, they are 0 and 1: one pod at a time, and never one beside the old ones, so a change
	// needs no spare GPU slot on a full rack (one of three workers is down while it restarts).
	MaxSurge       string `json:"maxSurge"`
	MaxUnavailable string `json:"maxUnavailable"`
}

// The rolling update of a role that sets neither bound.
const (
	defaultMaxSurge       = "0"
	defaultMaxUnavailable = "1"
)

func (r Rollout) bounds() (surge, unavailable string) {
	surge, unavailable = r.MaxSurge, r.MaxUnavailable
	if surge == "" {
		surge = defaultMaxSurge
	}
	if unavailable == "" {
		unavailable = defaultMaxUnavailable
	}
	return surge, unavailable
}

// Annotations are the pod template annotations that carry the rollout to the operator.
func (r Rollout) Annotations() map[string]string {
	switch r.Strategy {
	case Recreate:
		return map[string]string{StrategyAnnotation: Recreate}
	case RollingUpdate:
		surge, unavailable := r.bounds()
		return map[string]string{StrategyAnnotation: RollingUpdate, MaxSurgeAnnotation: surge, MaxUnavailableAnnotation: unavailable}
	}
	return nil
}

// Surge is how many pods beyond replicas a rollout may start, and Unavailable how many of the
// replicas it may stop first, as the operator resolves them (a percentage of replicas rounded up
// for surge, down for unavailable; both 0 makes it surge 1).
func (r Rollout) Surge(replicas int) (surge, unavailable int) {
	switch r.Strategy {
	case Recreate:
		return 0, replicas
	case RollingUpdate:
		s, u := r.bounds()
		surge, _ = scaled(s, replicas, true)
		unavailable, _ = scaled(u, replicas, false)
	default:
		surge, _ = scaled("25%", replicas, true)
		unavailable, _ = scaled("25%", replicas, false)
	}
	if surge == 0 && unavailable == 0 {
		surge = 1
	}
	return surge, unavailable
}

// Waves is how many rounds of pod starts replacing all replicas takes: each round replaces up to
// surge + unavailable pods (every pod at once with Recreate).
func (r Rollout) Waves(replicas int) int {
	if replicas <= 0 {
		return 0
	}
	surge, unavailable := r.Surge(replicas)
	step := surge + unavailable
	return (replicas + step - 1) / step
}

// RolloutWaves is how many rounds of pod starts a change that replaces every pod of the graph
// takes, each bounded by readiness.timeout: the slowest role's rounds when roles roll together; with
// restart.id under the operator's Sequential restart, every component's rounds, one component after
// the other.
func (c *Config) RolloutWaves() int {
	waves := []int{c.Frontend.Rollout.Waves(c.Frontend.Replicas)}
	for _, r := range c.Workers() {
		waves = append(waves, r.Config.Rollout.Waves(r.Config.Replicas))
	}
	total, slowest := 0, 0
	for _, w := range waves {
		total += w
		slowest = max(slowest, w)
	}
	if c.Restart.ID != "" && c.Restart.Strategy != "Parallel" {
		return total
	}
	return slowest
}

// scaled resolves an int or a percentage of replicas, as Kubernetes' intstr does.
func scaled(v string, replicas int, roundUp bool) (int, error) {
	if p, ok := strings.CutSuffix(v, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 || n > 100 {
			return 0, fmt.Errorf("%q is not a percentage from 0%% to 100%%", v)
		}
		f := float64(n) * float64(replicas) / 100
		if roundUp {
			return int(math.Ceil(f)), nil
		}
		return int(math.Floor(f)), nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is neither a non-negative integer nor a percentage", v)
	}
	return n, nil
}

func (r Rollout) validate(v validator, k string, replicas int, podAnnotations map[string]string) {
	v.choice(k+".strategy", reflect.TypeFor[Rollout](), "strategy", r.Strategy)
	for _, a := range []string{StrategyAnnotation, MaxSurgeAnnotation, MaxUnavailableAnnotation} {
		if _, ok := podAnnotations[a]; ok {
			v.add(strings.TrimSuffix(k, ".rollout")+".podAnnotations."+a, "set %s instead: the program writes this annotation from it", Key(k))
		}
	}
	if r.Strategy != RollingUpdate {
		for field, val := range map[string]string{"maxSurge": r.MaxSurge, "maxUnavailable": r.MaxUnavailable} {
			if val != "" {
				v.add(k+"."+field, "applies only to strategy %s, not %s", RollingUpdate, r.Strategy)
			}
		}
		return
	}
	s, u := r.bounds()
	surge, errS := scaled(s, replicas, true)
	if errS != nil {
		v.add(k+".maxSurge", "%v", errS)
	}
	unavailable, errU := scaled(u, replicas, false)
	if errU != nil {
		v.add(k+".maxUnavailable", "%v", errU)
	}
	if errS == nil && errU == nil && surge == 0 && unavailable == 0 {
		v.add(k+".maxUnavailable", "%s with %s %s comes to 0 of %d replicas, and so does the surge: the operator would then start 1 pod beside the old ones anyway; "+
			"make maxUnavailable at least 1 pod to roll without a spare GPU slot", u, Key(k+".maxSurge"), s, replicas)
	}
}
