package gogc

import (
	"os"
	"runtime/debug"
	"strconv"
)

// Percent is the GOGC that Raise sets: a collection each time the heap has grown by four times
// what was live after the last one, where Go's default is once.
const Percent = 400

// Raise has this process, and every process it starts after the call that inherits its
// environment, collect garbage a quarter as often as Go's default, unless GOGC is set already
// (then nothing changes; an empty GOGC counts as unset, as Go reads it). It trades memory for
// CPU: a heap may grow to five times what is live in it, where it grows to twice by default.
func Raise() error {
	if os.Getenv("GOGC") != "" {
		return nil
	}
	debug.SetGCPercent(Percent)
	return os.Setenv("GOGC", strconv.Itoa(Percent))
}
