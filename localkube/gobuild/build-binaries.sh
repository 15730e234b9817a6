#!/usr/bin/env bash
# Build the pinned Kubernetes control-plane binaries from the Go module proxy.
#
# Why: Hutch's k8s tests need a real kube-apiserver (CRD schemas, CEL, RBAC, watches) and a
# real controller-manager (GC, namespace deletion), and our machines have no Docker. The
# binaries are built from the Go module proxy (docs/contracts/local-kubernetes.md#toolset),
# cached per version under ~/.cache/hutch/k8s-bins/<versions>/ and never committed.
#
# Usage: bash localkube/gobuild/build-binaries.sh -> prints the bin-dir parent (last line of stdout)
# A second run finds `.complete` and returns at once. Progress goes to stderr.
# hutch_localkube.binaries (localkube/) reads the *_VERSION pins below: keep them as plain
# NAME=value lines.
set -euo pipefail

K8S_VERSION=v1.36.4
ETCD_VERSION=v3.6.10
KWOK_VERSION=v0.8.0
HELM_VERSION=v3.22.0
COREDNS_VERSION=v1.15.0

# kubelet and kube-proxy are the `node` tier's (docs/real-node.md). They come from the same
# wrapper module, so their dependencies are the apiserver's own versions.
K8S_CMDS=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy)
ALL_BINS=("${K8S_CMDS[@]}" etcd kwok helm)
# CoreDNS is the node tier's cluster DNS, built from coredns/main.go beside this script (a
# wrapper that links only the plugins the plane uses: no `forward`, no cloud SDKs). It is an
# add-on of the bin dir: its pin is not in the dir's name but in bin/.coredns.key (version +
# wrapper digest), so a cache made before CoreDNS joined, or with another COREDNS_VERSION, gets
# CoreDNS alone built into it instead of a rebuild of everything.
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
COREDNS_MAIN="$SCRIPT_DIR/coredns/main.go"

HUTCH_CACHE="${HUTCH_CACHE:-$HOME/.cache/hutch}"
GO="${GO:-$(command -v go || echo /usr/local/go/bin/go)}"
export GOTOOLCHAIN=local          # a pin that needs a newer Go fails fast instead of downloading one
export GOMODCACHE="$HUTCH_CACHE/go/mod"
export GOCACHE="$HUTCH_CACHE/go/build"
export GOFLAGS="-buildvcs=false -p=2"
export CGO_ENABLED=0
export GOPROXY="${GOPROXY:-https://proxy.golang.org,direct}"

log() { echo "build-binaries: $*" >&2; }

if ! [ -x "$GO" ]; then
    log "no Go toolchain found (set GO=/path/to/go); Go >= 1.26 is needed"
    exit 2
fi
GO_VERSION="$("$GO" env GOVERSION)"
PLATFORM="$("$GO" env GOOS)-$("$GO" env GOARCH)"
BINS_ROOT="$HUTCH_CACHE/k8s-bins"
NAME="k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}_kwok-${KWOK_VERSION}_helm-${HELM_VERSION}_${GO_VERSION}_${PLATFORM}"
FINAL="$BINS_ROOT/$NAME"

COREDNS_KEY="$COREDNS_VERSION-$(sha256sum "$COREDNS_MAIN" | cut -c1-16)"

# complete DIR: DIR was finished by a run of this script that built every binary we now expect
# (a cache made before kubelet joined the list counts as absent and is rebuilt, warm: ~1 min).
complete() {
    local b
    [ -f "$1/.complete" ] || return 1
    for b in "${ALL_BINS[@]}"; do [ -x "$1/bin/$b" ] || return 1; done
}

# coredns_current DIR: DIR's CoreDNS was built from this COREDNS_VERSION and this wrapper.
coredns_current() {
    [ -x "$1/bin/coredns" ] && [ "$(cat "$1/bin/.coredns.key" 2>/dev/null)" = "$COREDNS_KEY" ]
}

if complete "$FINAL" && coredns_current "$FINAL"; then
    echo "$FINAL"
    exit 0
fi

mkdir -p "$BINS_ROOT" "$GOMODCACHE" "$GOCACHE"
exec 9>"$BINS_ROOT/.lock"
if ! flock -n 9; then
    log "another build holds $BINS_ROOT/.lock; waiting"
    flock 9
fi
if complete "$FINAL" && coredns_current "$FINAL"; then    # another build finished meanwhile
    echo "$FINAL"
    exit 0
fi

STAGE="$(mktemp -d "$BINS_ROOT/.stage-XXXXXX")"
WORK="$(mktemp -d "${TMPDIR:-/tmp}/hutch-k8sbuild-XXXXXX")"
trap 'rm -rf "$STAGE" "$WORK"' EXIT
chmod 755 "$STAGE"                    # mktemp makes it 0700; the cache is read by all
mkdir -p "$STAGE/bin"
TIMINGS="$STAGE/timings.txt"
START_ALL=$SECONDS

# run_phase NAME FUNCTION: times one phase and records `phase=<name> seconds=<n>`.
run_phase() {
    local name="$1" start=$SECONDS
    log "phase $name: start"
    "$2"
    local line="phase=$name seconds=$((SECONDS - start))"
    echo "$line" >&2
    echo "$line" >>"$TIMINGS"
}

# --- Kubernetes: wrapper module supplying the staging replaces ------------------------------
# (docs/contracts/local-kubernetes.md#wrapper-module)

k8s_modules() {
    local info gomod commit
    info="$("$GO" mod download -json "k8s.io/kubernetes@$K8S_VERSION")"
    gomod="$(jq -r .GoMod <<<"$info")"
    commit="$(jq -r '.Origin.Hash // "unknown"' <<<"$info")"
    echo "$commit" >"$WORK/k8s-commit"
    mkdir -p "$WORK/k8s" && cd "$WORK/k8s"
    "$GO" mod init example.invalid/hutch-k8sbins 2>/dev/null
    "$GO" mod edit -go="$(awk '$1 == "go" {print $2; exit}' "$gomod")" -godebug=default=go1.26
    # The replace list is derived from the release's go.mod, never hard-coded.
    local staging=0 mod
    for mod in $(grep -oE '^\s*k8s\.io/[A-Za-z0-9._-]+ => \./staging/' "$gomod" | awk '{print $1}'); do
        "$GO" mod edit -replace="$mod=$mod@${K8S_VERSION/v1./v0.}"
        staging=$((staging + 1))
    done
    log "k8s.io/kubernetes@$K8S_VERSION commit=$commit staging-modules=$staging"
    local pkgs=()
    for c in "${K8S_CMDS[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$c@$K8S_VERSION"); done
    "$GO" get "${pkgs[@]}"
}

k8s_ldflags() {
    local commit date minor ldf="-s -w" pkg
    commit="$(cat "$WORK/k8s-commit")"
    date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
    minor="$(cut -d. -f2 <<<"$K8S_VERSION")"
    for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldf+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
        ldf+=" -X $pkg.gitCommit=$commit -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
    done
    echo "$ldf"
}

build_k8s_cmd() {
    cd "$WORK/k8s"
    "$GO" build -trimpath -ldflags "$(k8s_ldflags)" -o "$STAGE/bin/$1" "k8s.io/kubernetes/cmd/$1"
}
build_kube_apiserver() { build_k8s_cmd kube-apiserver; }
build_kube_controller_manager() { build_k8s_cmd kube-controller-manager; }
build_kube_scheduler() { build_k8s_cmd kube-scheduler; }
build_kubelet() { build_k8s_cmd kubelet; }
build_kube_proxy() { build_k8s_cmd kube-proxy; }

# --- etcd: a separate wrapper keeps its deps out of Kubernetes' version selection -------------
build_etcd() {
    mkdir -p "$WORK/etcd" && cd "$WORK/etcd"
    "$GO" mod init example.invalid/hutch-etcd 2>/dev/null
    "$GO" get "go.etcd.io/etcd/server/v3@$ETCD_VERSION"
    "$GO" build -trimpath -ldflags '-s -w' -o "$STAGE/bin/etcd" go.etcd.io/etcd/server/v3
}

# --- CoreDNS: our wrapper main (coredns/main.go) in a module of its own -----------------------
# A module of its own, like etcd's: CoreDNS's client-go never meets the apiserver's in one graph.
coredns_modules() {
    local info commit
    info="$("$GO" mod download -json "github.com/coredns/coredns@$COREDNS_VERSION")"
    commit="$(jq -r '.Origin.Hash // "unknown"' <<<"$info")"
    echo "$commit" >"$WORK/coredns-commit"
    mkdir -p "$WORK/coredns" && cd "$WORK/coredns"
    cp "$COREDNS_MAIN" main.go
    "$GO" mod init example.invalid/hutch-coredns 2>/dev/null
    "$GO" mod edit -go="$(awk '$1 == "go" {print $2; exit}' "$(jq -r .GoMod <<<"$info")")"
    # `go get` of the packages main.go imports (not `go mod tidy`, which also fetches the modules
    # their tests need): only what the build needs is downloaded.
    local pkgs=() pkg
    for pkg in $(grep -oE '"github\.com/coredns/coredns/[^"]+"' main.go | tr -d '"'); do
        pkgs+=("$pkg@$COREDNS_VERSION")
    done
    "$GO" get "${pkgs[@]}"
    log "github.com/coredns/coredns@$COREDNS_VERSION commit=$commit packages=${#pkgs[@]}"
}
build_coredns() {
    cd "$WORK/coredns"
    local ldf="-s -w" commit
    commit="$(cat "$WORK/coredns-commit")"
    # The proxy has no commit for this module (no Origin in its .info): then the version says it.
    [ "$commit" = unknown ] || ldf+=" -X github.com/coredns/coredns/coremain.GitCommit=$commit"
    "$GO" build -trimpath -ldflags "$ldf" -o "$STAGE/bin/coredns" .
    echo "$COREDNS_KEY" >"$STAGE/bin/.coredns.key"
}

# --- kwok and helm install cleanly with `go install pkg@version` -------------------------------
build_kwok() {
    cd "$WORK"                       # outside any go.mod: `go install pkg@version` stands alone
    GOBIN="$STAGE/bin" "$GO" install -trimpath -ldflags '-s -w' \
        "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
}
build_helm() {
    cd "$WORK"
    GOBIN="$STAGE/bin" "$GO" install -trimpath -ldflags '-s -w' \
        "helm.sh/helm/v3/cmd/helm@$HELM_VERSION"
}

# expect_version BINARY WANT ARGS...: the binary runs and its version output contains WANT.
# (No `tee /dev/stderr`: reopening a redirected stderr truncates the caller's log file.)
expect_version() {
    local binary="$1" want="$2" out
    shift 2
    out="$("$STAGE/bin/$binary" "$@" 2>/dev/null)"
    log "$binary: ${out%%$'\n'*}"
    if [[ "$out" != *"$want"* ]]; then
        log "$binary: expected '$want' in: $out"
        return 1
    fi
}

smoke() {
    local c
    for c in "${K8S_CMDS[@]}"; do expect_version "$c" "Kubernetes $K8S_VERSION" --version; done
    expect_version etcd "etcd Version: ${ETCD_VERSION#v}" --version
    expect_version kwok "$KWOK_VERSION" --version
    expect_version helm "${HELM_VERSION%.*}" version --short
    smoke_coredns
}
smoke_coredns() {
    expect_version coredns "CoreDNS-${COREDNS_VERSION#v}" -version
    local plugins
    plugins="$("$STAGE/bin/coredns" -plugins)"
    if grep -qxE 'forward|grpc' <<<"$plugins"; then
        log "coredns: links a forwarding plugin (forward, grpc); no query may leave the machine"
        return 1
    fi
}

# write_versions_env DIR: facts the plane needs at run time (kwok stages live in the module cache).
write_versions_env() {
    cat >"$1/versions.env" <<EOF
K8S_VERSION=$K8S_VERSION
ETCD_VERSION=$ETCD_VERSION
KWOK_VERSION=$KWOK_VERSION
HELM_VERSION=$HELM_VERSION
COREDNS_VERSION=$COREDNS_VERSION
GO_VERSION=$GO_VERSION
GOMODCACHE=$GOMODCACHE
EOF
}

# A complete bin dir whose CoreDNS is missing or stale: build CoreDNS alone into it. The new
# binary is renamed over the old one, so a running plane keeps the file it started.
if complete "$FINAL"; then
    log "reusing $FINAL; building CoreDNS $COREDNS_VERSION only"
    run_phase coredns-modules coredns_modules
    run_phase coredns build_coredns
    run_phase smoke-coredns smoke_coredns
    echo "phase=total seconds=$((SECONDS - START_ALL)) (CoreDNS only)" | tee -a "$TIMINGS" >&2
    mv -f "$STAGE/bin/coredns" "$FINAL/bin/coredns"
    mv -f "$STAGE/bin/.coredns.key" "$FINAL/bin/.coredns.key"
    write_versions_env "$STAGE"
    mv -f "$STAGE/versions.env" "$FINAL/versions.env"
    { echo "# CoreDNS add-on build, $(date -u +%Y-%m-%dT%H:%M:%SZ)"; cat "$TIMINGS"; } \
        >>"$FINAL/timings.txt"
    echo "$FINAL"
    exit 0
fi

run_phase k8s-modules k8s_modules
run_phase kube-apiserver build_kube_apiserver
run_phase kube-controller-manager build_kube_controller_manager
run_phase kube-scheduler build_kube_scheduler
run_phase kubelet build_kubelet
run_phase kube-proxy build_kube_proxy
run_phase etcd build_etcd
run_phase kwok build_kwok
run_phase helm build_helm
run_phase coredns-modules coredns_modules
run_phase coredns build_coredns
run_phase smoke smoke
echo "phase=total seconds=$((SECONDS - START_ALL))" | tee -a "$TIMINGS" >&2
{
    echo "gomodcache=$(du -sh "$GOMODCACHE" | cut -f1)"
    echo "gocache=$(du -sh "$GOCACHE" | cut -f1)"
    echo "bins=$(du -sh "$STAGE/bin" | cut -f1)"
    echo "cores=$(nproc) go=$GO_VERSION built=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
} | tee -a "$TIMINGS" >&2

write_versions_env "$STAGE"

rm -rf "$FINAL"                       # a leftover without .complete counts as absent
mv "$STAGE" "$FINAL"
touch "$FINAL/.complete"              # written last: its presence means "usable"
echo "$FINAL"
