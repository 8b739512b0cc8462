#!/bin/sh
# The Go language host as the toolchain's Pulumi CLI runs it: it builds the program into
# .toolchain/program/ of the program's directory (git-ignored) instead of a new temporary file on
# every run, so `go build` finds the binary up to date and skips the link (about 5 s of the 80 MB
# binary's 6 s build on 2 cores) until the program changes. GOTMPDIR beside the target makes the
# new binary land by rename, so a run that starts while another relinks never sees half a file.
# Pulumi.yaml's runtime.options.buildTarget names the same target for a current host; this (older)
# host reads runtime options only from its command line, where the CLI does not put them.
dir="$PWD/.toolchain/program"
mkdir -p "$dir/tmp" || exit 1
GOTMPDIR="$dir/tmp" exec "@HOST@" -buildTarget "$dir/minimax-m3" "$@"
