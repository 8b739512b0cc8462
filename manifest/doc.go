// Package manifest is what the stack's objects look like, built from the typed config with no
// Pulumi and no cluster: the DynamoGraphDeployment's spec (GraphSpec: the frontend, the workers'
// vLLM arguments and environment, the endpoint picker and its sidecars), the pod specs the site's
// scheduling settings make (SitePodSpec), the ComputeDomain's spec, the digests of each
// component's template that tell which update rolls which pods (TemplateDigests, SurgingRolls),
// the flags extraArgs may not repeat (RepeatedFlags), and the labels, annotations and resources of
// other projects the objects are known by.
//
// The components register these specs; the pre-deploy checks, the policies, the PR check and the
// portal read them. Imports run one way: manifest imports config only.
package manifest
