// Package policy holds the rules a platform team enforces on a minimax-m3 stack before a change
// lands, and reads what a change does to a stack from the Pulumi engine's events: the steps of a
// preview (offline on a render, or against a live stack) with each resource's inputs before and
// after.
//
// The rules run over the steps, not over the program's config, so they hold for whatever produced
// the objects: a `podTemplatePatch`, a future program change, a hand-written override.
package policy
