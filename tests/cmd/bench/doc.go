// Command bench measures the loop a change goes through, side by side, on the local API server with
// the real CRDs, warm, with hyperfine: the recipe's `kubectl apply --dry-run=server` of its files
// per profile, `pulumi preview` per stack through the CLI and through the Automation API, a no-op
// `pulumi up`, `make render` and the unit suite. It prints the medians with their ratio to the
// recipe's dry run of the same profile, as a Markdown table.
//
//	make bench            # or: cd tests && go run ./cmd/bench -runs 5
//
// It needs hyperfine (Debian: apt-get install hyperfine).
package main
