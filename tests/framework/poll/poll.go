package poll

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Until calls cond every interval, on the calling goroutine, until it reports done, ctx ends or
// timeout passes. An error from cond does not end the wait: it is kept as the last one seen (an API
// server's transient error, an object not created yet) and polling goes on. Until returns nil once
// cond is done; otherwise an error that says what was awaited, for how long, and the last error
// cond returned, if any. Call require.NoError on its result from the test goroutine.
func Until(ctx context.Context, timeout, interval time.Duration, what string, cond func(ctx context.Context) (bool, error)) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		done, err := cond(ctx)
		if err != nil {
			last = err
			return false, nil
		}
		return done, nil
	})
	if err == nil {
		return nil
	}
	if last != nil {
		return fmt.Errorf("%s: not done after %s: %w (last error: %w)", what, timeout, err, last)
	}
	return fmt.Errorf("%s: not done after %s: %w", what, timeout, err)
}

// True is Until for a condition that cannot fail.
func True(ctx context.Context, timeout, interval time.Duration, what string, cond func() bool) error {
	return Until(ctx, timeout, interval, what, func(context.Context) (bool, error) { return cond(), nil })
}

// ErrNotYet is what a condition returns for "not yet" when it has nothing better to say; Until
// reports it as the last error seen.
var ErrNotYet = errors.New("not yet")
