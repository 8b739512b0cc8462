// Package components is the minimax-m3 Pulumi program: one component resource per object the
// recipe deploys, and the program that wires them from a stack's config.
//
// Program (what main.go runs) and NewProgram (the Automation API's inline program) call Deploy,
// which reads and validates the stack's config (package config, and the flags extraArgs may not
// repeat: manifest.RepeatedFlags), runs the checks that need the cluster (package preflight, on a
// live reader of it, package internal/cluster): no object the stack would create belongs to someone
// else, the NVLink clique the workers go to or a refusal when the pool has no room; and, from the
// decisions those checks return as a value, registers,
// under one MiniMaxM3 component:
//
//   - Namespace, the Hugging Face token Secret (HFToken) and the model cache claim with its download
//     Job (ModelCache), each skipped when the stack is told to use an existing one;
//   - the ComputeDomain and its channel claim chain (ComputeDomain);
//   - the DynamoGraphDeployment (Graph): its spec built from the typed config (package manifest),
//     the AIPerf ConfigMap of a benchmark stack, and, while `up` waits for the graph, the Dynamo
//     operator's failures and unschedulable pods reported as they happen (graphstatus.go), and a
//     PodDisruptionBudget per worker role (disruptionbudget.go);
//   - the smoke test Job (SmokeTest), run once the graph is Ready.
//
// Another program builds the same Deployment as a component of its own with NewDeployment
// (packaged.go): typed config instead of stack config, the caller's provider, parent and
// transformations, the same checks; package pulumipackage serves it to programs in other languages.
//
// Every object carries the stack's labels and identity annotations (labels.go), which the
// ownership check (package preflight) reads back. The package holds Pulumi components only: reading the
// cluster lives in internal/cluster, the benchmark's Jobs in package benchmark, policies in package
// policy.
//
// Imports run one way: components imports config, manifest, preflight, placement and internal/...; automation, benchmark, policy,
// pulumipackage and the commands import components, never the reverse.
package components
