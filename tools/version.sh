#!/usr/bin/env bash
# Prints the version of a tool the toolchain builds, read from its one source: the go.mod of its
# module under tools/. The Kubernetes provider plugin's is the version of the provider's Go SDK in
# the project's go.mod (the two must match; tools/pulumi-resource-kubernetes builds the provider at
# that tag's commit). Used by tools/build.sh, the Makefile and the workflow.
#
#   bash tools/version.sh pulumi          v3.276.0
set -euo pipefail
tools=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# required GO_MOD MODULE: the version GO_MOD requires of MODULE.
required() {
  local v
  v=$(awk -v m="$2" '($1 == "require" && $2 == m) { print $3; exit } ($1 == m) { print $2; exit }' "$1")
  [ -n "$v" ] || { echo "version.sh: $1 does not require $2" >&2; exit 1; }
  printf '%s\n' "$v"
}

case "${1:-}" in
  pulumi) required "$tools/pulumi/go.mod" github.com/pulumi/pulumi/pkg/v3 ;;
  pulumi-language-go) required "$tools/pulumi-language-go/go.mod" github.com/pulumi/pulumi/sdk/v3 ;;
  pulumi-language-yaml) required "$tools/pulumi-language-yaml/go.mod" github.com/pulumi/pulumi-yaml ;;
  pulumi-resource-kubernetes)
    # The provider's source is pinned by commit in its tools module, which names the tag it is in a
    # "// provider vX.Y.Z" line: the two must agree, or the plugin would carry a version its code
    # is not.
    v=$(required "$tools/../go.mod" github.com/pulumi/pulumi-kubernetes/sdk/v4)
    pinned=$(awk '$1 == "//" && $2 == "provider" { print $3; exit }' "$tools/pulumi-resource-kubernetes/go.mod")
    if [ "$pinned" != "$v" ]; then
      echo "version.sh: go.mod requires the provider SDK $v, tools/pulumi-resource-kubernetes/go.mod builds the provider ${pinned:-(no \"// provider\" line)}: pin the provider at $v's commit there" >&2
      exit 1
    fi
    printf '%s\n' "${v#v}" ;;
  kubernetes) required "$tools/kubernetes/go.mod" k8s.io/kubernetes ;;
  kwok) required "$tools/kubernetes/go.mod" sigs.k8s.io/kwok ;;
  etcd) required "$tools/etcd/go.mod" go.etcd.io/etcd/server/v3 ;;
  golangci-lint) required "$tools/golangci-lint/go.mod" github.com/golangci/golangci-lint/v2 ;;
  actionlint) required "$tools/actionlint/go.mod" github.com/rhysd/actionlint ;;
  *) echo "usage: tools/version.sh pulumi|pulumi-language-go|pulumi-language-yaml|pulumi-resource-kubernetes|kubernetes|kwok|etcd|golangci-lint|actionlint" >&2; exit 2 ;;
esac
