// Command policy checks the policies of package policy, with no cluster or against a live stack.
//
// With no -events it renders each stack (as `make render` does, no cluster) and checks every object
// the stack would create:
//
//	go run ./cmd/policy -stack agg -stack disagg -set minimax-m3:namespace.name=inference
//
// With -events it checks the steps of a preview against a live stack, written by
// `pulumi preview --event-log <file>`, which adds the rules about replacements and deletions and
// prints whether the workers roll:
//
//	export PULUMI_DEBUG_COMMANDS=true # --event-log is a debug flag, the one the Automation API reads
//	pulumi preview --stack agg --event-log /tmp/agg.events && go run ./cmd/policy -stack agg -events /tmp/agg.events
//
// With -up it is `pulumi up` with the policies in front of it: it previews the stack through the
// pulumi CLI (saving the plan), checks that preview as -events does, and only when it passes
// applies exactly the checked plan:
//
//	go run ./cmd/policy -stack agg -up -allow-roll Worker
//
// It exits 1 when a rule is broken (with -up: nothing was applied).
package main
