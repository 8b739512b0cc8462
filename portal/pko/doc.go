// Package pko runs portal requests through the Pulumi Kubernetes Operator (v2: a workspace pod per
// stack) instead of the portal's own process: for a portal managing hundreds of stacks, or stacks
// on many clusters. The portal.Manager runs every operation in-process, which is right for a
// handful of stacks beside the portal.
//
//	runner := &pko.Runner{Kube: kube, Dynamic: dyn, Namespace: "pulumi-stacks",
//		ProjectRepo: "https://git.example.com/platform/minimax-m3.git", Commit: "<40-hex sha>",
//		Backend: "s3://pulumi-state", SecretsProvider: "awskms://alias/pulumi",
//		EnvRefs: map[string]pko.SecretKey{"PULUMI_CONFIG_PASSPHRASE": {Name: "pulumi", Key: "passphrase"}},
//		ServiceAccountName: "pulumi", Image: "pulumi/pulumi-go:3.276.0@sha256:<64 hex>",
//		Gate: m} // a portal.Manager on the same backend and cluster: the policies and roll consent
//	_, err := runner.Apply(ctx, r, pko.ApplyOptions{DryRun: true})      // checked, then a server-side dry run
//	_, err = runner.Apply(ctx, r, pko.ApplyOptions{AllowRoll: "Worker"}) // the Stack, and the token's Secret <stack>-hf-token
//	res, err := runner.Wait(ctx, r.Name(), progress) // Ready: res.Outputs
//
// The request (portal.Request) is validated as the Manager validates it, then checked by the Gate
// as the portal's up checks it (every policy rule and consent for what restarts, on a preview;
// without a Gate Apply refuses, ErrUngated, unless Ungated), and the Stack carries the same config
// values. Wait returns as soon as the operator reports a failed update of the Stack's
// current generation (*UpdateFailedError, with the update's message; the operator keeps retrying
// and stalls only after several failures: *StalledError). Resources default to
// DefaultWorkspaceResources (requests 1 CPU and 2 GiB, limit 4 GiB). The workspace Image is
// required and pinned by digest, and ServiceAccountName required unless ActAsTeam: then each
// request's workspace pod runs as its team's own ServiceAccount from the site install
// (teamboundary.WorkspaceServiceAccount; the team is the site's label on the request's namespace,
// and ApplyOptions.Identity must be in its group), so the API server's RBAC and audit log see the
// team, not the portal. Instead of ProjectRepo and
// Commit, LocalDir runs a program prebuilt into Image; TrackBranch deploys a branch's newest
// commit (an explicit choice, never a fallback). A Stack or token Secret of the request's name
// that the runner did not make is never written (NotOursError), and its apply is never forced.
// docs/portal.md says more.
package pko
