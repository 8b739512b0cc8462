// Package automation drives minimax-m3 stacks from Go with the Pulumi Automation API, for a platform
// portal or a test: it runs the same program as `pulumi up`, inline, against a stack's config file.
//
//	dir, _ := os.MkdirTemp("", "mm3")
//	_ = automation.CopyProject("/path/to/minimax-m3", dir) // the API writes the stack file; keep the checkout clean
//	s, err := automation.NewStack(ctx, automation.Options{
//		ProjectDir: dir, Stack: "disagg",
//		Config: auto.ConfigMap{
//			"minimax-m3:namespace.name": {Value: "team-a"},
//			"minimax-m3:hfToken":        {Value: token, Secret: true}, // stored through stdin, not argv
//		},
//		EnvVars: map[string]string{"PULUMI_BACKEND_URL": "s3://…", "KUBECONFIG": "/etc/portal/kubeconfig"},
//	})
//	res, err := s.Up(ctx, optup.ProgressStreams(os.Stdout))
//	url := res.Outputs["frontendUrl"].Value
//
// A Stack's Preview, Up and Refresh hand the inline program the keys the stack's config sets, so
// unknown keys fail exactly as through the CLI: read from the stack's Pulumi.<stack>.yaml in its
// workspace (no CLI run, no secret decrypted), or through `pulumi config` when the project file
// sets config, the stack imports an ESC environment, or the workspace has no settings file. The
// ownership check reads the cluster with the KUBECONFIG in EnvVars. Stack.Config reads and
// validates a stack's config; Stack.Restart sets restart.id and runs up (what cmd/bench uses
// between points). Render renders a stack to a directory as `make render` does.
//
// After an update, a Stack reads what the Automation API reads back (the outputs, the summary)
// without decrypting what it does not return: the outputs with one `pulumi stack output` run
// (a second, with --show-secrets, only when an output is secret), and the summary of Up, Refresh
// and Destroy with secret config masked (optup.ShowSecrets(true) and the like ask for it). With a
// passphrase, every decrypting CLI run derives the key again (a quarter second of CPU).
//
// Every stack the process opens shares one Pulumi CLI, PulumiCommand(), whose version is checked
// once (pass it as auto.Pulumi to a workspace of your own); a stack whose EnvVars set
// PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK leaves the check to the Automation API.
//
// It imports components, config and policy; portal and the commands import it.
package automation
