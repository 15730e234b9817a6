#!/usr/bin/env bash
# Install the browser the Web UI's tests drive: Debian's chromium and chromium-driver
# (tests/ui, docs/web-ui.md).
#
# Why Debian's: the driver and the browser come from one source package, so their versions
# always match, and nothing is downloaded from outside the distribution at test time.
# scripts/test.sh calls this before pytest; a second run is a no-op (dpkg already has both).
# Without root it only checks: missing packages are a warning for a developer (tests/ui skips,
# naming this script) and an error in CI (CI=true or HUTCH_BROWSER_REQUIRED=1), where the UI
# tests may not skip.
set -euo pipefail

PACKAGES=(chromium chromium-driver)

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
    case "${HUTCH_BROWSER_REQUIRED:-}${CI:-}" in
    *1* | *true* | *yes*)
        echo "install-ui-deps: need root to apt-get install ${missing[*]}" \
            "(CI or HUTCH_BROWSER_REQUIRED=1: the browser tests may not skip)" >&2
        exit 2
        ;;
    esac
    echo "install-ui-deps: not installing ${missing[*]} (needs root): tests/ui will skip;" \
        "as root: bash scripts/install-ui-deps.sh" >&2
    exit 0
fi
exec bash "$(dirname "$0")/apt-install.sh" install-ui-deps "${missing[@]}"
