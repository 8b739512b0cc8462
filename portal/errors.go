package portal

import (
	"errors"
	"fmt"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"minimax-m3/config"
)

// ErrBusy is what every BusyError is.
var ErrBusy = errors.New("busy")

// BusyError says a stack already runs an operation (here, or in another process holding the
// backend's lock).
type BusyError struct {
	Stack, Operation string
}

func (e *BusyError) Error() string {
	if e.Operation == "" {
		return fmt.Sprintf("stack %s is busy: another process is updating it", e.Stack)
	}
	return fmt.Sprintf("stack %s is busy: %s is running", e.Stack, e.Operation)
}

// Is makes errors.Is(err, ErrBusy) true.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// ErrAtCapacity is what every CapacityError is.
var ErrAtCapacity = errors.New("at capacity")

// CapacityError says the portal is at one of its caps (Options.MaxOperations, MaxStacks).
type CapacityError struct {
	What  string
	Limit int
}

func (e *CapacityError) Error() string {
	return fmt.Sprintf("the portal is at its limit of %d %s: try again once one ends, or ask its operator to raise the limit", e.Limit, e.What)
}

// Is makes errors.Is(err, ErrAtCapacity) true.
func (e *CapacityError) Is(target error) bool { return target == ErrAtCapacity }

// InvalidRequestError carries every problem of a request, each naming its config key.
type InvalidRequestError struct{ Problems config.Problems }

func (e *InvalidRequestError) Error() string { return e.Problems.Error() }

// ErrUnknownStack is returned for a stack the backend does not have.
var ErrUnknownStack = errors.New("unknown stack")

// opError turns the engine's errors into the package's, without any secret in them.
func (m *Manager) opError(stack string, err error, secret Secret) error {
	if auto.IsConcurrentUpdateError(err) {
		return &BusyError{Stack: stack}
	}
	if auto.IsSelectStack404Error(err) {
		return fmt.Errorf("%w: %s", ErrUnknownStack, stack)
	}
	return fmt.Errorf("stack %s: %s", stack, secret.Scrub(err.Error()))
}
