// Package pullrequest is what the PR check asks of GitHub about a pull request, over its REST API:
// whether a maintainer other than the author consented to worker rolls, and one comment per stack.
// The workflow builds it from the pull request's base (cmd/pullrequest), so a branch cannot change
// how its own check decides.
package pullrequest
