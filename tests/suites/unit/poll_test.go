package unit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"minimax-m3/tests/framework/poll"
)

// The tests' wait helper keeps waiting past an error, and says what it waited for and the last
// error when it gives up.
func TestPollUntil(t *testing.T) {
	ctx := context.Background()
	calls := 0
	require.NoError(t, poll.Until(ctx, time.Second, time.Millisecond, "third call", func(context.Context) (bool, error) {
		calls++
		if calls < 3 {
			return false, errors.New("transient")
		}
		return true, nil
	}), "an error does not end the wait")
	assert.Equal(t, 3, calls)

	err := poll.Until(ctx, 20*time.Millisecond, time.Millisecond, "never", func(context.Context) (bool, error) {
		return false, errors.New("the object is not found")
	})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "never: not done after 20ms")
	assert.Contains(t, err.Error(), "last error: the object is not found")

	err = poll.True(ctx, 10*time.Millisecond, time.Millisecond, "false", func() bool { return false })
	require.Error(t, err)
	assert.NotContains(t, err.Error(), "last error")
}
