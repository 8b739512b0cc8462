package unit

import (
	"os"
	"runtime/debug"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"minimax-m3/automation"
	"minimax-m3/tests/framework/gogc"
)

// gogc.Raise sets GOGC for the process and what it starts only where GOGC is unset (or empty, which
// Go reads as unset), and the clean environment of the CLI the portal starts keeps it.
func TestRaiseGOGC(t *testing.T) {
	restore := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(restore) })
	gcPercent := func() int { p := debug.SetGCPercent(100); debug.SetGCPercent(p); return p }

	for name, unset := range map[string]bool{"GOGC unset": true, "GOGC empty": false} {
		t.Run(name+": raised in the environment and for this process", func(t *testing.T) {
			t.Setenv("GOGC", "")
			if unset {
				require.NoError(t, os.Unsetenv("GOGC"))
			}
			debug.SetGCPercent(100)
			require.NoError(t, gogc.Raise())
			require.Equal(t, strconv.Itoa(gogc.Percent), os.Getenv("GOGC"))
			require.Equal(t, gogc.Percent, gcPercent())
			require.Contains(t, automation.CleanEnviron(), "GOGC="+strconv.Itoa(gogc.Percent), "the portal's CLI keeps it")
		})
	}
	t.Run("GOGC set: left as it is", func(t *testing.T) {
		t.Setenv("GOGC", "50")
		debug.SetGCPercent(50)
		require.NoError(t, gogc.Raise())
		require.Equal(t, "50", os.Getenv("GOGC"))
		require.Equal(t, 50, gcPercent())
	})
}
