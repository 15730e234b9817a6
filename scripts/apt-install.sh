#!/usr/bin/env bash
# The install-*-deps scripts' last step: apt-get install the packages they found missing, as
# root, logged under the caller's name with the time it took.
# Usage: bash scripts/apt-install.sh CALLER PACKAGE...
set -euo pipefail
caller=$1
shift
start=$SECONDS
echo "$caller: apt-get install $*" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "$@" >&2
echo "$caller: phase=apt seconds=$((SECONDS - start))" >&2
