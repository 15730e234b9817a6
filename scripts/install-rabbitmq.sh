#!/usr/bin/env bash
# Install the reference broker, RabbitMQ 3.10.8 from Debian bookworm, for side-by-side tests and bench/.
#
# Why this script exists: the tests and the benchmark start their own private RabbitMQ node on free
# loopback ports (testing/hutch_testing/rabbitmq.py), so the package must be installed but its system
# service must NOT run and hold port 5672. Debian starts the service from the package's postinst via
# invoke-rc.d; a policy-rc.d that answers 101 forbids that. We install a temporary one if the machine
# has none, and stop any node the package managed to start anyway.
#
# Idempotent and non-interactive: run as root, from CI or by hand. `apt-get update` runs only when the
# package lists do not know rabbitmq-server yet. Without root (`make test` as a developer) it only
# checks: an installed 3.10.8 is all the tests need; a missing one is a warning, since the
# side-by-side tests then skip, except where they may not skip (CI, HUTCH_REFERENCE_REQUIRED=1,
# the rule of testing/hutch_testing/pytest_plugin.py), where it fails.
set -euo pipefail

readonly WANTED_VERSION="3.10.8"
readonly POLICY_RC=/usr/sbin/policy-rc.d

log() { echo "install-rabbitmq: $*" >&2; }

reference_required() {
    case "${CI:-}" in "" | 0 | false | no) ;; *) return 0 ;; esac
    [[ "${HUTCH_REFERENCE_REQUIRED:-}" == 1 ]]
}

installed_version() {
    dpkg-query -W -f='${Status} ${Version}\n' rabbitmq-server 2>/dev/null |
        awk '$1 == "install" && $3 == "installed" { print $4 }'
}

version_ok() {
    local version
    version="$(installed_version)"
    [[ "${version}" == "${WANTED_VERSION}"-* || "${version}" == "${WANTED_VERSION}" ]]
}

ensure_package_lists() {
    if ! apt-cache show rabbitmq-server >/dev/null 2>&1; then
        log "apt-get update (package lists do not know rabbitmq-server)"
        apt-get update -qq
    fi
}

apt_install() {
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        rabbitmq-server >/dev/null
}

# Forbid service start-up during the install; remove our policy file afterwards (trap).
forbid_service_start() {
    if [[ ! -e "${POLICY_RC}" ]]; then
        printf '#!/bin/sh\nexit 101\n' >"${POLICY_RC}"
        chmod 0755 "${POLICY_RC}"
        trap 'rm -f "${POLICY_RC}"' EXIT
    fi
}

stop_system_node() {
    # No systemd here; if a node started anyway (e.g. a machine without policy-rc.d honoured),
    # stop it so that port 5672 and the default node name stay free.
    if pgrep -u rabbitmq -f 'beam.*rabbit' >/dev/null 2>&1; then
        log "stopping the system rabbitmq-server node"
        rabbitmqctl stop >/dev/null 2>&1 || pkill -u rabbitmq -f 'beam.*rabbit' || true
    fi
}

main() {
    if [[ "$(id -u)" -ne 0 ]]; then
        # A user without root can still run the tests once the package is there.
        if version_ok; then
            log "rabbitmq-server $(installed_version) already installed"
            exit 0
        fi
        if reference_required; then
            log "rabbitmq-server ${WANTED_VERSION} is not installed, installing it needs root," \
                "and the side-by-side tests may not skip here (CI / HUTCH_REFERENCE_REQUIRED=1)"
            exit 1
        fi
        log "rabbitmq-server ${WANTED_VERSION} is not installed and installing it needs root:" \
            "the side-by-side tests will skip (as root: bash scripts/install-rabbitmq.sh)"
        exit 0
    fi
    if ! version_ok; then
        ensure_package_lists
        forbid_service_start
        log "apt-get install rabbitmq-server"
        if ! apt_install; then
            log "install failed; refreshing the package lists and retrying once"
            apt-get update -qq
            apt_install
        fi
    fi
    stop_system_node
    if ! version_ok; then
        log "expected rabbitmq-server ${WANTED_VERSION}, found '$(installed_version)'"
        exit 1
    fi
    log "rabbitmq-server $(installed_version) installed ($(command -v rabbitmq-server))"
}

main "$@"
