// Command bench runs the recipe's benchmark sweep on a deployed stack: for each concurrency point
// it restarts the graph's pods (every pod deleted at once, as the recipe does; or through
// spec.restart), runs one AIPerf Job with its own ARTIFACT_DIR, copies the artifacts out, and
// merges the points so far into one table and plot. It compares finished sweeps too.
//
//	go run ./cmd/bench -stack disagg -concurrency 16,32,64 [-trace ./trace.jsonl] [-out dir]
//	go run ./cmd/bench -stack disagg -resume -out dir
//	go run ./cmd/bench -compare dirA,dirB[,...] -out dir
//
// It uses the stack as `pulumi up` does: run it from the project directory (or -project-dir), with
// the stack's backend logged in (or PULUMI_BACKEND_URL) and its passphrase or secrets provider in
// the environment. Interrupting it (Ctrl-C) deletes the running Job and the helper pod.
package main
