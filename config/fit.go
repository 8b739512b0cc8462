package config

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/api/resource"
)

// What a worker needs that no single key says: settings of one role that must fit each other (its
// memory, its startup budget) and settings that several components must agree on (the router and
// the workers' KV blocks, the prefill and decode workers' KV cache). Each is a failure a real rack
// shows only hours later, as an OOMKilled or restarted worker or a router that never matches a
// prefix, so preview refuses it naming the keys.

// EngineReadyTimeoutEnv is the vLLM engine's budget, in seconds, for its workers to come up (load
// the weights, compile, capture CUDA graphs); vLLM's own default is DefaultEngineReadyTimeout.
const EngineReadyTimeoutEnv = "VLLM_ENGINE_READY_TIMEOUT_S"

// DefaultEngineReadyTimeout is vLLM's VLLM_ENGINE_READY_TIMEOUT_S when it is not set, in seconds.
const DefaultEngineReadyTimeout = 600

// EngineHostMemory is what a worker is assumed to need of its memory limit beside the CPU KV
// offload buffer: the engine's processes (Python, the CUDA contexts, NCCL's host buffers, the
// multiprocess executor's shared tensors). A limit that leaves less for them is refused.
var EngineHostMemory = resource.MustParse("64Gi")

// OperatorStartupProbe is the Dynamo operator's startup probe for a worker (a Probe's fields left
// at 0 take these): 10 s apart, 720 failures, so it restarts a worker not live after 2 hours.
var OperatorStartupProbe = Probe{PeriodSeconds: 10, TimeoutSeconds: 5, FailureThreshold: 720}

// Budget is how long the kubelet lets a probe fail before it restarts the container, in seconds:
// the initial delay plus the period times the failure threshold, fields left at 0 taking def's.
func (p *Probe) Budget(def Probe) int {
	q := def
	if p != nil {
		for _, f := range []struct {
			dst *int
			v   int
		}{{&q.InitialDelaySeconds, p.InitialDelaySeconds}, {&q.PeriodSeconds, p.PeriodSeconds}, {&q.FailureThreshold, p.FailureThreshold}} {
			if f.v != 0 {
				*f.dst = f.v
			}
		}
	}
	return q.InitialDelaySeconds + q.PeriodSeconds*q.FailureThreshold
}

// EngineReadyTimeout is the role's VLLM_ENGINE_READY_TIMEOUT_S in seconds (vLLM's default when
// unset), and the key of the value that sets it (<role>.env[i].value, or extraEnv's); ok is false
// when the value is not a whole number.
func (w WorkerConfig) EngineReadyTimeout(k string) (seconds int, key string, ok bool) {
	for _, l := range []struct {
		key string
		env []EnvVar
	}{{k + ".env", w.Env}, {k + ".extraEnv", w.ExtraEnv}} {
		for i, e := range l.env {
			if e.Name == EngineReadyTimeoutEnv {
				n, err := strconv.Atoi(e.Value)
				return n, fmt.Sprintf("%s[%d].value", l.key, i), err == nil && n >= 0
			}
		}
	}
	return DefaultEngineReadyTimeout, "", true
}

// fits checks that a worker role's settings fit each other.
func (w WorkerConfig) fits(v validator, k string) {
	// The startup probe must outlast the engine's own timeout: then a worker that cannot come up
	// exits with the engine's reason instead of being restarted by the kubelet halfway through a
	// load that would have finished. A startup probe set to null keeps the operator's (2 h), the
	// recipe's form, which adopting a recipe deployment without a restart needs: not checked.
	if timeout, key, ok := w.EngineReadyTimeout(k); !ok {
		v.add(key, "%s must be a whole number of seconds", EngineReadyTimeoutEnv)
	} else if p := w.Probes.Startup; p != nil {
		if budget := p.Budget(OperatorStartupProbe); budget <= timeout {
			where := "vLLM's default"
			if key != "" {
				where = EngineReadyTimeoutEnv + " at " + key
			}
			period := OperatorStartupProbe.PeriodSeconds
			if p.PeriodSeconds > 0 {
				period = p.PeriodSeconds
			}
			v.add(k+".probes.startup.failureThreshold", "the startup probe restarts a worker not live after %s, no later than the engine's own timeout of %s (%s) ends: "+
				"set the threshold to at least %d (at %d s apart), or lower the engine's timeout", seconds(budget), seconds(timeout), where,
				(timeout-p.InitialDelaySeconds)/period+1, period)
		}
	}

	limit, hasLimit := quantityOf(w.Resources.Limits["memory"])
	if !hasLimit {
		return
	}
	// /dev/shm is a memory-backed emptyDir: what the engine writes there is charged to the
	// container's memory limit, so a tmpfs larger than the limit promises what it cannot hold.
	if shm, ok := quantityOf(w.SharedMemorySize); ok && shm.Cmp(limit) > 0 {
		v.add(k+".sharedMemorySize", "%s of /dev/shm is more than the worker's memory limit (%s.resources.limits.memory %s), which every byte written there is charged to",
			w.SharedMemorySize, k, limit.String())
	}
	// The CPU offload buffer is pinned host memory the engine allocates whole at start and keeps.
	if o := w.VLLM.KVTransfer.CPUOffload; o != nil && w.VLLM.KVTransferConfig == "" {
		need := resource.NewQuantity(o.CPUBytesToUse, resource.BinarySI)
		need.Add(EngineHostMemory)
		if need.Cmp(limit) > 0 {
			v.add(k+".vllm.kvTransfer.cpuOffload.cpuBytesToUse", "%d bytes (%s) of CPU KV offload and about %s for the engine itself do not fit the worker's memory limit (%s.resources.limits.memory %s): "+
				"the engine allocates the buffer whole as it starts, and the worker would be OOMKilled starting; lower cpuBytesToUse or raise the limit",
				o.CPUBytesToUse, gib(o.CPUBytesToUse), EngineHostMemory.String(), k, limit.String())
		}
		if o.BlockSize > 0 && w.VLLM.BlockSize > 0 && o.BlockSize%w.VLLM.BlockSize != 0 {
			v.add(k+".vllm.kvTransfer.cpuOffload.blockSize", "%d is not a multiple of the engine's block size (%s.vllm.blockSize %d): vLLM offloads whole GPU blocks",
				o.BlockSize, k, w.VLLM.BlockSize)
		}
	}
}

// agree checks what several components must agree on.
func (c *Config) agree(v validator) {
	if c.Profile != Aggregated && c.Profile != Disaggregated {
		return
	}
	workers := c.Workers()
	// The KV-aware router hashes prompts in blocks of its own size and matches them against the
	// blocks the workers report in their KV events: a different size never matches a prefix.
	if c.Frontend.Router.Mode == "kv" {
		for _, r := range workers {
			if bs := r.Config.VLLM.BlockSize; bs != c.Frontend.Router.KVCacheBlockSize {
				v.add("frontend.router.kvCacheBlockSize", "%d differs from %s.vllm.blockSize %d: the KV-aware router must hash prompts in the blocks the workers cache",
					c.Frontend.Router.KVCacheBlockSize, r.Key, bs)
			}
		}
	}
	// NIXL moves a prefill worker's KV blocks into a decode worker's cache as they are: both must
	// lay them out alike.
	if c.Profile == Disaggregated && len(workers) == 2 {
		p, d := workers[0], workers[1]
		if p.Config.VLLM.BlockSize != d.Config.VLLM.BlockSize {
			v.add(d.Key+".vllm.blockSize", "%d differs from %s.vllm.blockSize %d: NIXL moves KV blocks between them as they are",
				d.Config.VLLM.BlockSize, p.Key, p.Config.VLLM.BlockSize)
		}
		if kvDtype(p.Config.VLLM.KVCacheDtype) != kvDtype(d.Config.VLLM.KVCacheDtype) {
			v.add(d.Key+".vllm.kvCacheDtype", "%q differs from %s.vllm.kvCacheDtype %q: NIXL moves KV blocks between them as they are",
				d.Config.VLLM.KVCacheDtype, p.Key, p.Config.VLLM.KVCacheDtype)
		}
	}
}

// kvDtype is a KV cache dtype as vLLM lays the cache out: fp8 is fp8_e4m3.
func kvDtype(s string) string {
	if s == "fp8" {
		return "fp8_e4m3"
	}
	return s
}

func quantityOf(s string) (resource.Quantity, bool) {
	if s == "" {
		return resource.Quantity{}, false
	}
	q, err := resource.ParseQuantity(s)
	return q, err == nil // a bad one is reported at its own key
}

func seconds(n int) string {
	if n%3600 == 0 {
		return fmt.Sprintf("%d h", n/3600)
	}
	return fmt.Sprintf("%d s", n)
}

func gib(b int64) string { return fmt.Sprintf("%.1fGi", float64(b)/(1<<30)) }
