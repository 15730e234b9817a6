#!/usr/bin/env bash
# What building the broker's C extensions takes (broker/setup.py, hutch_broker.store._runs and
# hutch_broker.protocol._content): a C compiler, zlib's headers and Python's.
# scripts/bootstrap.sh calls this before the editable install that builds them; a second run is
# a no-op.
#
# The extensions are optional to pip (an install without a compiler still succeeds, and the
# broker runs their Python twins), so without root this only warns; the tests then fail in
# tests/broker/store/test_runs_native.py and tests/broker/protocol/test_content_native.py,
# saying why. Python's headers come with pyenv's and python.org's builds; Debian's python3 needs
# python3-dev.
set -euo pipefail
PY=${PYTHON:-python3}

missing=()
command -v cc >/dev/null 2>&1 || missing+=(gcc libc6-dev)
[[ -e /usr/include/zlib.h ]] || missing+=(zlib1g-dev)
include="$("$PY" -c 'import sysconfig; print(sysconfig.get_path("include"))')"
[[ -e "$include/Python.h" ]] || missing+=(python3-dev)
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "install-build-deps: not installing ${missing[*]} (needs root): the broker's C extension" \
        "will not build and the broker runs its Python twin; as root: bash scripts/install-build-deps.sh" >&2
    exit 0
fi
exec bash "$(dirname "$0")/apt-install.sh" install-build-deps "${missing[@]}"
