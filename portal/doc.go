// Package portal drives minimax-m3 stacks for a platform portal: typed requests validated before the
// engine starts, one operation per stack at a time, typed progress from the engine's events, and
// secrets that never reach a command line. It runs the same program and starts from the same
// committed stack files as `pulumi up`.
//
//	m, err := portal.New(portal.Options{
//		ProjectDir: "/srv/minimax-m3",            // Pulumi.yaml and the base stack files
//		StateDir:   "/var/lib/minimax-m3-portal", // durable: one workspace per stack, saved plans
//		BackendURL: "s3://pulumi-state",          // default: file://<StateDir>/state
//		SecretsProvider: "awskms://alias/portal", // default: passphrase (PULUMI_CONFIG_PASSPHRASE in EnvVars)
//		EnvVars: map[string]string{"KUBECONFIG": "/etc/portal/kubeconfig"},
//	})
//	r := portal.NewRequest("disagg", "disagg-team-a") // the base stack's defaults, typed
//	r.Config.Namespace.Name = "team-a"
//	r.HFToken = portal.Secret(token)                    // prints and serializes as [secret]
//	if ps := r.Validate(); ps != nil { /* config.Problems: every problem by key */ }
//	pre, err := m.Preview(ctx, r, portal.RunOptions{Plan: planFile})       // the steps, and a saved plan
//	up, err := m.Up(ctx, r, portal.RunOptions{Plan: planFile, Progress: f}) // exactly what was approved
//
// Requests are validated in-process by config.Parse on exactly the values the stack would hold,
// before any engine starts: a bad request returns *InvalidRequestError with every problem by key
// and touches nothing. Only what differs from the base profile's defaults is written to the
// stack's config, so later releases' defaults still reach it.
//
// RunOptions.Progress receives Events from the engine's event stream: resource, type, operation,
// started / waiting (the provider's messages while it waits) / done / failed, the message, and how
// long the resource's step has run; then a summary.
//
// One operation per stack: a second one gets *BusyError (errors.Is(err, ErrBusy)) at once, or
// waits with RunOptions.Wait; a stack locked by another process is the same error. Each stack has
// its own workspace under StateDir/workspaces/<stack>, which keeps its config for the next
// operation and the next portal process.
//
// Up previews the change first and checks it as the PR check does (every rule of package policy,
// and consent for restarts): a component the change would restart needs RunOptions.AllowRoll to
// name it ("Worker", or "all"); without it, or with a broken rule, the up is refused
// (*InvalidRequestError, problems at allowRoll and policy) and nothing is applied. Preview says
// what an up would need (PreviewResult.Rolls and Violations). Preview with RunOptions.Plan saves
// the plan; Up with it runs exactly that plan.
//
// The token reaches the CLI on its standard input, never as an argument; errors and events are
// scrubbed of it (Secret.Scrub, ScrubError); outputs and history decrypt nothing. Cancelling (the
// context, or Cancel) interrupts the CLI as Ctrl-C does; pending operations the engine leaves are
// cleared (interrupted creations imported from the cluster, the rest dropped), so the next up
// completes. At start, Interruptions finds the stacks an earlier process left locked or pending,
// and Recover clears them.
//
// Files by concern: request.go (requests and secrets), manager.go (the Manager and one operation
// per stack), workspace.go (a stack's workspace and config), operations.go (preview, up, refresh,
// destroy), reads.go (stacks, outputs, history), events.go (progress), recovery.go, errors.go.
// Package portal/httpapi serves a Manager over HTTP; package portal/pko runs requests through the
// Pulumi Kubernetes Operator. Both import portal, never the reverse.
package portal
