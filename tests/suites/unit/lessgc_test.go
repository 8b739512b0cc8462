package unit

import (
	"os"
	"runtime/debug"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"minimax-m3/tests/framework/localcluster"
)

// LessGC sets GOGC for the process and its children only where GOGC is unset.
func TestLessGC(t *testing.T) {
	restore := debug.SetGCPercent(100)
	t.Cleanup(func() { debug.SetGCPercent(restore) })

	t.Run("GOGC unset: set for this process and its children", func(t *testing.T) {
		t.Setenv("GOGC", "")
		require.NoError(t, os.Unsetenv("GOGC"))
		debug.SetGCPercent(100)
		require.NoError(t, localcluster.LessGC())
		require.Equal(t, strconv.Itoa(localcluster.GCPercent), os.Getenv("GOGC"))
		require.Equal(t, localcluster.GCPercent, debug.SetGCPercent(100), "this process's own GOGC")
	})
	t.Run("GOGC set: left as it is", func(t *testing.T) {
		t.Setenv("GOGC", "50")
		debug.SetGCPercent(50)
		require.NoError(t, localcluster.LessGC())
		require.Equal(t, "50", os.Getenv("GOGC"))
		require.Equal(t, 50, debug.SetGCPercent(50))
	})
}
