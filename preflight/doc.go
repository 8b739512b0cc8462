// Package preflight runs the checks that need the cluster before a stack touches it, and returns
// what they decided as a value (Decisions) instead of writing it into the stack's config.
//
// Check reads the cluster through an ObjectReader (internal/cluster.Reader, or a test's fake) and,
// in order: refuses objects of an API the cluster does not serve (prometheus-operator's, Gateway
// API's, the Inference Extension's); a hostname another route already holds on the site's Gateway;
// a route that Gateway would not take; any object the stack would create that belongs to another
// stack, team or tool (adopt takes over what no stack manages) and a change of the live graph's
// components the Dynamo operator refuses; decides the Pod Security level of the namespace the stack
// creates and the RuntimeClass of the GPU workers from the site's install; and decides the NVLink
// clique the workers go to (package placement), keeping a running graph where it is, or refuses with
// the table of cliques. Each refusal is a config.Problems naming the keys to change. A check the
// cluster cannot answer is skipped with a warning, unless kubernetes.requireRead says otherwise.
//
// The components build from the Decisions (manifest.Decisions: the clique and the RuntimeClass
// the graph's objects take; Ownership: what the stack adopts; the namespace's level).
//
// Imports run one way: preflight imports config, manifest, placement and internal/cluster, and
// nothing of Pulumi; components imports preflight.
package preflight
