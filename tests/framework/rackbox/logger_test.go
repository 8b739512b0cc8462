package rackbox

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// loggerHelperEnv makes TestControllerRuntimeLoggerHelper the process under test: "quiet" does
// what the box does when it starts its players, "unset" does not.
const loggerHelperEnv = "RACKBOX_CONTROLLER_RUNTIME_LOGGER"

// A process that runs the box (`make local`, the tests) ends without controller-runtime's "log.SetLogger(...) was
// never called" and its stack trace: the box sets the process-wide logger. Controller-runtime
// prints that once something logs through it 30 s after start, so each run here is a process of
// its own that waits that long (idle); the process without the box's setting shows the message,
// which proves the check sees it.
func TestAProcessRunningTheBoxPrintsNoControllerRuntimeStackTrace(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"quiet", "unset"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			cmd := exec.Command(os.Args[0], "-test.run=^TestControllerRuntimeLoggerHelper$", "-test.count=1")
			cmd.Env = append(os.Environ(), loggerHelperEnv+"="+mode)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			if mode == "quiet" {
				assert.NotContains(t, string(out), "log.SetLogger(...) was never called")
				assert.NotContains(t, string(out), "goroutine ", "no stack trace")
			} else {
				assert.Contains(t, string(out), "log.SetLogger(...) was never called", "the check sees what an unset logger prints")
			}
		})
	}
}

// TestControllerRuntimeLoggerHelper is the process TestAProcessRunningTheBoxPrintsNoControllerRuntimeStackTrace
// runs; run by itself (loggerHelperEnv unset) it has nothing to do.
func TestControllerRuntimeLoggerHelper(t *testing.T) {
	mode := os.Getenv(loggerHelperEnv)
	if mode == "" {
		return
	}
	if mode == "quiet" {
		quietControllerRuntime()
	}
	time.Sleep(31 * time.Second)
	// What an informer of controller-runtime logs late in a run.
	ctrllog.Log.WithName("informers").Info("a late line")
}
