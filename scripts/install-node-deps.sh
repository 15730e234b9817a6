#!/usr/bin/env bash
# Install the Debian packages the `node` plane tier needs (a real kubelet runs real containers).
#
# Why: the node tier runs containerd + runc from Debian (see docs/real-node.md for why not
# containerd 2.x), the CNI bridge/host-local/loopback/portmap plugins, debootstrap for the
# images' base rootfs, iptables for the rule that keeps pod traffic off the uplink, and nftables
# (the `nft` tool) for kube-proxy's nftables mode.
# CI starts on a fresh machine, so `make k8s-bins` and scripts/test.sh call this; a second run is
# a no-op (dpkg already has every package). Without root it only checks: the node tier needs root to run
# at all, so for a developer's `make test` missing packages are a warning (the node tests skip,
# naming this script), and an error only under HUTCH_K8S_REQUIRED=1 (CI), as in the plane itself. Only Debian's own apt is used: nothing from image registries.
# Nothing is started or enabled: the plane (hutch_localkube) starts containerd itself, as one
# of its processes.
set -euo pipefail

PACKAGES=(containerd runc containernetworking-plugins debootstrap iptables nftables)

missing=()
for pkg in "${PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$pkg")
    fi
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    case "${HUTCH_K8S_REQUIRED:-}" in
    1 | true | yes | on)
        echo "install-node-deps: need root to apt-get install ${missing[*]}" \
            "(HUTCH_K8S_REQUIRED=1: the node tier may not skip)" >&2
        exit 2
        ;;
    esac
    echo "install-node-deps: not installing ${missing[*]} (needs root): the node-tier tests" \
        "will skip; as root: bash scripts/install-node-deps.sh" >&2
    exit 0
fi
start=$SECONDS
echo "install-node-deps: apt-get install ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d 101: the containerd package must not start a system service (PID 1 is no init here,
# and the plane runs its own containerd on a private socket).
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy"
    created_policy=1
fi
trap '[ "$created_policy" = 1 ] && rm -f "$policy"' EXIT
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
echo "install-node-deps: phase=apt seconds=$((SECONDS - start))" >&2
