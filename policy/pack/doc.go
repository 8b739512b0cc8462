// Command pack is the policies of package policy as a Pulumi policy pack (CrossGuard):
//
//	pulumi preview --stack agg --policy-pack policy/pack
//	pulumi up --stack agg --policy-pack policy/pack
//
// The Pulumi CLI runs it through its Go language host (PulumiPolicy.yaml: runtime go), which
// builds it. Each rule that reads one object is a resource policy, checked before the engine
// creates or updates that object; the rule that reads the whole stack is a stack policy, checked
// at the end of the preview (and of an update run with --skip-preview, after it). Rules about what
// a change does to live objects need a preview's steps and are not in the pack (package policy).
package main
