"""``python -m hutch_localkube up [--tier apiserver|workloads|node]`` / ``down``: a plane for
manual work (``make plane``), under .hutch-dev/ in the checkout, until Ctrl-C, SIGTERM or ``down``.

Why: developers debug the operator against the same plane the tests use, with ``kubectl`` from
another shell; ``down`` stops exactly the PIDs that ``up`` recorded, even after ``up`` was killed.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time

from hutch_localkube import binaries, planes, realnode, supervision

log = logging.getLogger("hutch.k8s")

DEV_RUN_DIR = binaries.REPO_ROOT / ".hutch-dev"
DOWN_COMMAND = "python -m hutch_localkube down"


def cmd_up(tier: str) -> int:
    """Starts a plane under .hutch-dev/ and keeps it up until Ctrl-C, SIGTERM or ``down``."""
    owner = supervision.owner_alive(DEV_RUN_DIR)
    if owner:
        log.error("a plane is already up (pid %d); run `%s`", owner.pid, DOWN_COMMAND)
        return 1
    supervision.stop_recorded(DEV_RUN_DIR)
    realnode.cleanup(DEV_RUN_DIR)
    supervision.remove_run(DEV_RUN_DIR)
    plane = planes.REGISTRY.start(tier, run_dir=DEV_RUN_DIR)
    sys.stdout.write(f"export KUBECONFIG={plane.kubeconfig}\n")
    sys.stdout.flush()
    log.info(
        "%s plane up in %.1fs; Ctrl-C or `%s` stops it", tier, plane.start_seconds, DOWN_COMMAND
    )
    try:
        while all(c.proc.poll() is None for c in plane.components):
            time.sleep(1)
        log.error("a component exited; see %s", plane.logs)
        plane.failed = True
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        planes.REGISTRY.stop_all()


def cmd_down() -> int:
    """Stops exactly the PIDs recorded in .hutch-dev/pids (the owner first, it cleans up)."""
    owner = supervision.owner_alive(DEV_RUN_DIR)
    if owner:
        # Its SIGTERM handler stops its components one by one: give it time for all of them.
        supervision.stop_pid(
            owner.pid, owner.exe, grace=supervision.GRACE_SECONDS * (len(planes.PORT_NAMES) + 1)
        )
    supervision.stop_recorded(DEV_RUN_DIR)
    realnode.cleanup(DEV_RUN_DIR)
    supervision.remove_run(DEV_RUN_DIR)
    log.info("stopped; removed %s", DEV_RUN_DIR)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``up [--tier apiserver|workloads|node]`` or ``down``; the exit status of either."""
    parser = argparse.ArgumentParser(
        prog="python -m hutch_localkube",
        description="A local Kubernetes control plane for manual work (make plane), under "
        ".hutch-dev/; `up` runs until Ctrl-C, SIGTERM or `down`.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start a plane under .hutch-dev/ until interrupted")
    up.add_argument("--tier", choices=binaries.TIERS, default="apiserver")
    sub.add_parser("down", help="stop the plane recorded in .hutch-dev/pids")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="plane: %(message)s")
    try:
        return cmd_up(args.tier) if args.command == "up" else cmd_down()
    except (binaries.BinariesMissingError, planes.PlaneStartError) as exc:
        log.error("%s", exc)
        return 2
    except KeyboardInterrupt:  # Ctrl-C during start: planes.REGISTRY.start already stopped it
        return 130
