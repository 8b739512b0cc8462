package components

import (
	"errors"
	"fmt"
	"os"

	"github.com/pulumi/pulumi/sdk/v3/go/common/constant"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
)

// Run runs program as `pulumi up` runs main.go, like pulumi.Run, with one error line per failure:
// pulumi.Run logs every error the run ends with again, as "an unhandled error occurred: program
// failed: waiting for RPCs: ...", after the graph's wait has already shown it on the resource it
// is about. Here the program's errors are shown once (ShowErrors); anything else (an RPC failing)
// is shown once on stderr. The process then exits with the status that tells the engine the error
// is shown (constant.ExitStatusLoggedError), as pulumi.Run does. The Automation API's inline
// programs get the same from automation's language runtime.
func Run(program pulumi.RunFunc) {
	err := pulumi.RunErr(ShowErrors(program))
	switch {
	case err == nil:
		return
	case errors.Is(err, pulumi.ErrPlugins):
		// The engine asked for the plugins the program needs: pulumi.Run prints them, and exits.
		pulumi.Run(program)
	case !Shown(err):
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
	}
	os.Exit(constant.ExitStatusLoggedError)
}

// ShowErrors is program with its error shown once, on the stack, and marked as shown (Shown), so
// that whoever runs it tells the engine to show nothing more (a language host's bail) instead of
// the error again. An error the program cannot log is returned unmarked.
func ShowErrors(program pulumi.RunFunc) pulumi.RunFunc {
	return func(ctx *pulumi.Context) error {
		err := program(ctx)
		if err == nil || Shown(err) {
			return err
		}
		if ctx.Log.Error(err.Error(), nil) != nil {
			return err
		}
		return shown{err}
	}
}

// shown is an error the program has shown already, on the resource it is about.
type shown struct{ error }

func (r shown) Unwrap() error { return r.error }

// Shown tells whether err, or an error it wraps, has been shown already: the run's error when the
// graph's wait failed (waiting for RPCs: ...) or the program returned an error through ShowErrors.
func Shown(err error) bool {
	var r shown
	return errors.As(err, &r)
}
