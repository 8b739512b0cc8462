package localcluster

import (
	"os"
	"runtime/debug"
	"strconv"
)

// GCPercent is the GOGC that LessGC sets: a collection each time the heap grows by four times
// what was live after the last one, where Go's default is once.
const GCPercent = 400

// LessGC has this process, and every process it starts after the call, collect garbage a quarter
// as often as Go's default, unless GOGC is set already (then nothing changes). It trades memory
// for CPU. Everything a local run starts is a Go program: kube-apiserver, etcd, the controllers,
// kwok, the Dynamo operator, the Pulumi CLI, the provider, and the Go builds of the program.
// On 2 cores, with the default GOGC, collection was a quarter of the API servers' CPU. The
// integration suite then spent a quarter less CPU in all and ran 20% faster (docs/measurements.md).
// A heap may grow to five times what is live in it, where it grows to twice by default: the
// suite's processes stay within a few GiB together.
func LessGC() error {
	if _, set := os.LookupEnv("GOGC"); set {
		return nil
	}
	debug.SetGCPercent(GCPercent)
	return os.Setenv("GOGC", strconv.Itoa(GCPercent))
}
