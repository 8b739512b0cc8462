#!/usr/bin/env bash
# Builds the pinned toolchain the tests and the offline main job need, from Go modules:
# the Pulumi CLI, the Go and YAML language hosts, the Kubernetes provider plugin, kube-apiserver, etcd,
# golangci-lint, actionlint, the rest of the local control plane (kube-controller-manager,
# kube-scheduler), kwok (the simulated GB200 rack's nodes), the Dynamo operator and the NVIDIA DRA
# driver's compute-domain-controller.
#
#   bash tools/build.sh            every tool
#   bash tools/build.sh linters    golangci-lint and actionlint only (what `make check` needs)
#   bash tools/build.sh runtime    every tool but the linters (what `make local` and the tests run)
#
# Each tool's version has one source: the go.mod of its module under tools/ (tools/version.sh
# reads it; the Kubernetes provider's is the SDK's version in the project's go.mod, which the
# plugin must match). Binaries live in a per-user cache keyed by tool, version and a hash of what
# is built (the tool module's go.mod and go.sum, the package, the link flags and the Go version),
# so a fresh clone (as in CI) reuses them, and a changed go.mod builds anew instead of reusing a
# stale binary. $ROOT/.toolchain/bin only links to them.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tools="$root/tools"
cache="${MINIMAX_M3_TOOLCHAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/minimax-m3/toolchain}"
bin="$root/.toolchain/bin"
# The plugins stay off PATH: the engine loads the provider from PULUMI_HOME, where it is installed
# below, and the language host from beside the CLI, without the "using ... from $PATH" warning on
# every run.
plugins="$root/.toolchain/plugins"
mkdir -p "$cache" "$bin" "$plugins"

case "${1:-}" in
  "" | linters | runtime) ;;
  *) echo "usage: tools/build.sh [linters|runtime]" >&2; exit 2 ;;
esac

version() { bash "$tools/version.sh" "$1"; }
# Each assignment on its own line: a failed look-up then stops the script (set -e).
PULUMI_VERSION=$(version pulumi)
LANGUAGE_GO_VERSION=$(version pulumi-language-go)
LANGUAGE_YAML_VERSION=$(version pulumi-language-yaml)
KUBERNETES_PROVIDER_VERSION=$(version pulumi-resource-kubernetes)
KUBERNETES_VERSION=$(version kubernetes)
ETCD_VERSION=$(version etcd)
KWOK_VERSION=$(version kwok)

log() { printf 'toolchain: %s\n' "$*" >&2; }

# key DIR PACKAGE LDFLAGS: a hash of what a build from tools module DIR depends on (the Go version
# is the one that module builds with).
key() {
  local go_version
  go_version=$(cd "$1" && go env GOVERSION)
  { cat "$1/go.mod" "$1/go.sum"; printf '%s\n' "$2" "$3" "$go_version"; } | sha256sum | cut -c1-12
}

# build NAME VERSION MODULE_DIR PACKAGE [LDFLAGS] [LINK_DIR]
build() {
  local name=$1 version=$2 dir=$3 pkg=$4 ldflags=${5:-} link=${6:-$bin}
  local out
  out="$cache/$name-$version-$(key "$dir" "$pkg" "$ldflags")/$name"
  if [ ! -x "$out" ]; then
    log "building $name $version (cold builds take minutes)"
    local start=$SECONDS
    mkdir -p "$(dirname "$out")"
    (cd "$dir" && go build -trimpath -ldflags "-s -w $ldflags" -o "$out.tmp" "$pkg")
    mv "$out.tmp" "$out"
    log "built $name in $((SECONDS - start))s"
  fi
  [ "$link/$name" = "$out" ] || ln -sfn "$out" "$link/$name"
}

if [ "${1:-}" != runtime ]; then
  GOLANGCI_LINT_VERSION=$(version golangci-lint)
  ACTIONLINT_VERSION=$(version actionlint)
  build golangci-lint "$GOLANGCI_LINT_VERSION" "$tools/golangci-lint" github.com/golangci/golangci-lint/v2/cmd/golangci-lint
  build actionlint "$ACTIONLINT_VERSION" "$tools/actionlint" github.com/rhysd/actionlint/cmd/actionlint
fi
if [ "${1:-}" = linters ]; then
  log "linters ready in $bin ($((SECONDS))s)"
  exit 0
fi

# The CLI's own folder holds the language host (below), so it is linked to itself.
pulumi_ldflags="-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_VERSION"
pulumi_dir="$cache/pulumi-$PULUMI_VERSION-$(key "$tools/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi "$pulumi_ldflags")"
build pulumi "$PULUMI_VERSION" "$tools/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi "$pulumi_ldflags" "$pulumi_dir"
# install_script TEMPLATE DEST SED_EXPRESSIONS...: a wrapper from tools/, written atomically.
install_script() {
  local template=$1 dest=$2; shift 2
  local args=()
  for e in "$@"; do args+=(-e "$e"); done
  sed "${args[@]}" "$template" > "$dest.tmp" && chmod +x "$dest.tmp" && mv -f "$dest.tmp" "$dest"
}
# bin/pulumi is a wrapper that sets the project's offline defaults (tools/pulumi.sh).
rm -f "$bin/pulumi"
install_script "$tools/pulumi.sh" "$bin/pulumi" "s|@ROOT@|$root|" "s|@CLI@|$pulumi_dir/pulumi|"

# The provider's module zip lacks the files its main package embeds: build a copy of the command
# inside the tools module after running upstream's generate step, which writes them.
provider_cmd="$tools/pulumi-resource-kubernetes/.build/pulumi-resource-kubernetes"
provider_ldflags="-X github.com/pulumi/pulumi-kubernetes/provider/v4/pkg/version.Version=$KUBERNETES_PROVIDER_VERSION"
provider_key=$(key "$tools/pulumi-resource-kubernetes" ./.build/pulumi-resource-kubernetes "$provider_ldflags")
if [ ! -x "$cache/pulumi-resource-kubernetes-$KUBERNETES_PROVIDER_VERSION-$provider_key/pulumi-resource-kubernetes" ]; then
  # `go list -m` prints nothing for a module that is not in the module cache yet: download it first.
  src=$(cd "$tools/pulumi-resource-kubernetes" &&
    go mod download github.com/pulumi/pulumi-kubernetes/provider/v4 &&
    go list -m -f '{{.Dir}}' github.com/pulumi/pulumi-kubernetes/provider/v4)
  if [ -z "$src" ] || [ ! -f "$src/cmd/pulumi-resource-kubernetes/main.go" ]; then
    log "cannot find the provider's source in the module cache (got '$src')"
    exit 1
  fi
  rm -rf "$provider_cmd" && mkdir -p "$provider_cmd"
  cp "$src"/cmd/pulumi-resource-kubernetes/{main.go,generate.go,schema.json,terraform-mapping.json} "$provider_cmd/"
  chmod u+w "$provider_cmd"/*
  (cd "$provider_cmd" && VERSION=$KUBERNETES_PROVIDER_VERSION go run generate.go)
fi
build pulumi-resource-kubernetes "$KUBERNETES_PROVIDER_VERSION" "$tools/pulumi-resource-kubernetes" ./.build/pulumi-resource-kubernetes \
  "$provider_ldflags" "$plugins"
rm -f "$bin/pulumi-resource-kubernetes"

# The Go language host is a plugin the CLI bundles: it looks for it next to its own (resolved)
# binary, so it is installed there, and kept off PATH (no "using ... from $PATH" warning). What is
# installed there is tools/pulumi-language-go.sh, which runs the host with a build target.
language_go_ldflags="-X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$LANGUAGE_GO_VERSION"
language_go_dir="$cache/pulumi-language-go-$LANGUAGE_GO_VERSION-$(key "$tools/pulumi-language-go" github.com/pulumi/pulumi/sdk/v3/go/pulumi-language-go "$language_go_ldflags")"
build pulumi-language-go "$LANGUAGE_GO_VERSION" "$tools/pulumi-language-go" github.com/pulumi/pulumi/sdk/v3/go/pulumi-language-go \
  "$language_go_ldflags" "$language_go_dir"
rm -f "$bin/pulumi-language-go" "$plugins/pulumi-language-go"
install_script "$tools/pulumi-language-go.sh" "$pulumi_dir/pulumi-language-go" \
  "s|@HOST@|$language_go_dir/pulumi-language-go|"

# The YAML language host, for programs that use the package from YAML: beside the CLI too.
build pulumi-language-yaml "$LANGUAGE_YAML_VERSION" "$tools/pulumi-language-yaml" github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml \
  "-X github.com/pulumi/pulumi-yaml/pkg/version.Version=$LANGUAGE_YAML_VERSION" "$pulumi_dir"

build etcd "$ETCD_VERSION" "$tools/etcd" .

k8s_minor=${KUBERNETES_VERSION#v1.}; k8s_minor=${k8s_minor%%.*}
k8s_ldflags=""
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  k8s_ldflags+=" -X $p.gitVersion=$KUBERNETES_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$k8s_minor"
done
# The local control plane: one tools module, so the three servers and kwok share most of their
# compiled packages (kwok is built against the same Kubernetes libraries).
for server in kube-apiserver kube-controller-manager kube-scheduler; do
  build "$server" "$KUBERNETES_VERSION" "$tools/kubernetes" "k8s.io/kubernetes/cmd/$server" "$k8s_ldflags"
done
build kwok "$KWOK_VERSION" "$tools/kubernetes" sigs.k8s.io/kwok/cmd/kwok

# envtest wants kubectl beside the servers. Use the machine's when it has one; build it otherwise.
if command -v kubectl >/dev/null 2>&1 && [ "$(command -v kubectl)" != "$bin/kubectl" ]; then
  ln -sfn "$(command -v kubectl)" "$bin/kubectl"
else
  build kubectl "$KUBERNETES_VERSION" "$tools/kubernetes" k8s.io/kubernetes/cmd/kubectl "$k8s_ldflags"
fi

# The Dynamo operator, for the tests that run it against the local API server (the real
# operator in the loop). Built from its source tree (MINIMAX_M3_DYNAMO_OPERATOR, default the
# reference copy beside the project), never copied into the project. One module it needs is served
# only by the file-based proxy beside it (MINIMAX_M3_GOPROXY_EXTRA). The cache key is a hash of the
# source's Go files and module files, so another Dynamo release builds beside this one.
operator_src="${MINIMAX_M3_DYNAMO_OPERATOR:-$root/../shared/reference/dynamo-operator}"
operator_proxy="${MINIMAX_M3_GOPROXY_EXTRA:-$root/../shared/reference/goproxy}"
if [ -f "$operator_src/go.mod" ]; then
  operator_src=$(cd "$operator_src" && pwd)
  operator_version=$(cd "$operator_src" &&
    find . -name '*.go' -not -path './test/*' -o -name go.mod -o -name go.sum | LC_ALL=C sort |
    xargs sha256sum | sha256sum | cut -c1-12)
  GOPROXY="file://$(cd "$operator_proxy" && pwd),$(go env GOPROXY)" \
    build dynamo-operator "src-$operator_version" "$operator_src" ./cmd/main.go
else
  log "no Dynamo operator source at $operator_src (MINIMAX_M3_DYNAMO_OPERATOR): the operator tests will fail"
  rm -f "$bin/dynamo-operator"
fi

# The NVIDIA DRA driver's compute-domain-controller, for the rack box (MINIMAX_M3_DRA_DRIVER,
# default the reference copy beside the project; never copied into the project). It builds in
# tools/compute-domain-controller against the control plane's Kubernetes libraries above (their
# compiled packages are reused), not its vendored copies. It reads its templates from /templates;
# the build points it at a copy beside the binary instead, through a `go build -overlay` of the
# two files that name the path (the source tree is not changed).
dra_src="${MINIMAX_M3_DRA_DRIVER:-$root/../shared/reference/dra-driver-nvidia-gpu}"
if [ -f "$dra_src/go.mod" ]; then
  dra_src=$(cd "$dra_src" && pwd)
  dra_version=$(cd "$dra_src" &&
    { find api cmd/compute-domain-controller pkg internal -name '*.go' -not -name '*_test.go' 2>/dev/null; ls templates/*; } |
    LC_ALL=C sort | xargs sha256sum | cat - "$tools/compute-domain-controller/go.sum" | sha256sum | cut -c1-12)
  dra_out="$cache/compute-domain-controller-src-$dra_version"
  if [ ! -x "$dra_out/compute-domain-controller" ]; then
    log "building compute-domain-controller src-$dra_version"
    start=$SECONDS
    work="$dra_out.build" && rm -rf "$work" && mkdir -p "$work/overlay" "$dra_out"
    cp "$tools/compute-domain-controller/go.mod" "$tools/compute-domain-controller/go.sum" "$work/"
    go mod edit -modfile "$work/go.mod" -replace "sigs.k8s.io/dra-driver-nvidia-gpu=$dra_src"
    cp "$dra_src"/templates/compute-domain-*.tmpl.yaml "$dra_out/"
    overlay="{\"Replace\":{"
    for f in daemonset.go resourceclaimtemplate.go; do
      sed "s|\"/templates/|\"$dra_out/|" "$dra_src/cmd/compute-domain-controller/$f" > "$work/overlay/$f"
      overlay+="\"$dra_src/cmd/compute-domain-controller/$f\":\"$work/overlay/$f\","
    done
    printf '%s}}' "${overlay%,}" > "$work/overlay.json"
    (cd "$tools/compute-domain-controller" && go build -trimpath -ldflags "-s -w" -modfile "$work/go.mod" \
      -overlay "$work/overlay.json" -o "$dra_out/compute-domain-controller.tmp" sigs.k8s.io/dra-driver-nvidia-gpu/cmd/compute-domain-controller)
    mv "$dra_out/compute-domain-controller.tmp" "$dra_out/compute-domain-controller"
    rm -rf "$work"
    log "built compute-domain-controller in $((SECONDS - start))s"
  fi
  ln -sfn "$dra_out/compute-domain-controller" "$bin/compute-domain-controller"
else
  log "no NVIDIA DRA driver source at $dra_src (MINIMAX_M3_DRA_DRIVER): the rack box will not start"
  rm -f "$bin/compute-domain-controller"
fi

# Install the provider into the project's PULUMI_HOME so the engine finds it without a download
# and without the "using ... from \$PATH" warning.
export PULUMI_HOME="${PULUMI_HOME:-$root/.toolchain/pulumi-home}"
export PULUMI_SKIP_UPDATE_CHECK=true
# The installed copy is marked with the build's cache key: a provider rebuilt at the same version
# (a changed go.sum, link flags or Go) replaces it.
installed="$PULUMI_HOME/plugins/resource-kubernetes-v$KUBERNETES_PROVIDER_VERSION"
if [ "$(cat "$installed/.minimax-m3-key" 2>/dev/null)" != "$provider_key" ]; then
  "$bin/pulumi" plugin install resource kubernetes "v$KUBERNETES_PROVIDER_VERSION" --reinstall \
    --file "$plugins/pulumi-resource-kubernetes" >&2
  printf '%s\n' "$provider_key" > "$installed/.minimax-m3-key"
fi

log "ready in $bin ($((SECONDS))s)"
