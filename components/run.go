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
// is about. Here an error the program returns is shown once, as it is; one already shown (a
// reported error, such as the graph's wait's) is not shown again; anything else (an RPC failing) is
// shown once on stderr. The process then exits with the status that tells the engine the error is
// shown (constant.ExitStatusLoggedError), as pulumi.Run does.
func Run(program pulumi.RunFunc) {
	err := pulumi.RunErr(func(ctx *pulumi.Context) error {
		if err := program(ctx); err != nil {
			if ctx.Log.Error(err.Error(), nil) != nil {
				return err // not shown: shown on stderr below
			}
			return reported{err}
		}
		return nil
	})
	switch {
	case err == nil:
		return
	case errors.Is(err, pulumi.ErrPlugins):
		// The engine asked for the plugins the program needs: pulumi.Run prints them, and exits.
		pulumi.Run(program)
	case !isReported(err):
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
	}
	os.Exit(constant.ExitStatusLoggedError)
}

// reported is an error the program has shown already, on the resource it is about.
type reported struct{ error }

func (r reported) Unwrap() error { return r.error }

// isReported tells whether err, or an error it wraps, has been shown already.
func isReported(err error) bool {
	var r reported
	return errors.As(err, &r)
}
