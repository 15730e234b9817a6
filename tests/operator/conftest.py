"""Fixtures for operator tests: a running operator (KopfRunner) and helpers to drive CRs.

The operator runs in-process (``kopf.testing.KopfRunner``, a thread with its own event loop) against
the session's apiserver plane; brokers are real processes on loopback, reached through
``HUTCH_BROKER_ADDRESSES`` (docs/contracts/local-kubernetes.md#fake-addresses). The sweep and status
periods are shortened here, before ``hutch_operator.handlers`` is imported, because timers take
their interval at registration.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HUTCH_SYNC_PERIOD", "2")
os.environ.setdefault("HUTCH_BROKER_STATUS_PERIOD", "2")
os.environ.setdefault("HUTCH_DELETE_TIMEOUT", "6")
os.environ.setdefault("HUTCH_METRICS_PORT", "0")

REPO = Path(__file__).resolve().parents[2]
GROUP_PATH = "/apis/hutch.dev/v1alpha1"
NODE_BROKER_IMAGE = "localhost/hutch/hutch-broker:0.1.0"


class Kube:
    """Thin helpers over ``Plane.api`` for one namespace."""

    def __init__(self, plane: Any, namespace: str) -> None:
        self.plane = plane
        self.namespace = namespace

    def path(self, plural: str, name: str = "") -> str:
        base = f"{GROUP_PATH}/namespaces/{self.namespace}/{plural}"
        return f"{base}/{name}" if name else base

    def create(self, kind: str, plural: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": "hutch.dev/v1alpha1", "kind": kind, "metadata": {"name": name}}
        status, reply = self.plane.api("POST", self.path(plural), {**body, "spec": spec})
        assert status == 201, reply
        return reply

    def get(self, plural: str, name: str) -> dict[str, Any] | None:
        status, reply = self.plane.api("GET", self.path(plural, name))
        return reply if status == 200 else None

    def patch_spec(self, plural: str, name: str, spec: dict[str, Any]) -> Any:
        """kubectl patch (merge); returns the CompletedProcess so tests can assert refusals."""
        return self.plane.kubectl(
            "-n", self.namespace, "patch", f"{plural}.hutch.dev", name, "--type=merge",
            "-p", json.dumps({"spec": spec}), check=False,
        )  # fmt: skip

    def delete(self, plural: str, name: str) -> None:
        self.plane.api("DELETE", self.path(plural, name))

    def secret(self, name: str, data: dict[str, str]) -> None:
        encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
        body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}, "data": encoded}
        status, reply = self.plane.api("POST", f"/api/v1/namespaces/{self.namespace}/secrets", body)
        assert status == 201, reply

    def get_secret(self, name: str) -> dict[str, Any] | None:
        status, reply = self.plane.api("GET", f"/api/v1/namespaces/{self.namespace}/secrets/{name}")
        return reply if status == 200 else None

    def events(self, name: str) -> list[dict[str, Any]]:
        path = f"/api/v1/namespaces/{self.namespace}/events"
        _, reply = self.plane.api("GET", f"{path}?fieldSelector=involvedObject.name%3D{name}")
        return list(reply.get("items", []))

    def reasons(self, name: str) -> set[str]:
        return {event.get("reason", "") for event in self.events(name)}

    def wait_reason(self, name: str, reason: str, timeout: float = 10.0) -> None:
        """Kopf posts Events from a background queue, so one may land just after the status
        change or deletion a test waited for."""
        wait_for(lambda: reason in self.reasons(name), timeout, f"{reason} event on {name}")


def ready(obj: dict[str, Any] | None, type_: str = "Ready") -> tuple[str, str]:
    """(status, reason) of a condition, or ("", "") when absent."""
    for condition in (obj or {}).get("status", {}).get("conditions", []):
        if condition.get("type") == type_:
            return condition.get("status", ""), condition.get("reason", "")
    return "", ""


def wait_for(check: Callable[[], Any], timeout: float = 20.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what or check}: last={last!r}")


@pytest.fixture(scope="module")
def crds_applied(apiserver: Any) -> Any:
    apiserver.apply_crds(REPO / "crds")
    return apiserver


@contextlib.contextmanager
def run_operator(plane: Any) -> Iterator[Any]:
    """The operator in-process against ``plane``, watching all namespaces; checked at exit."""
    from kopf.testing import KopfRunner
    from kubernetes.config import kube_config

    plane.apply_crds(REPO / "crds")
    os.environ["KUBECONFIG"] = str(plane.kubeconfig)
    # The kubernetes package reads $KUBECONFIG once, at import (collection time, before the plane
    # existed); Kopf's default login handler goes through it.
    kube_config.KUBE_CONFIG_DEFAULT_LOCATION = str(plane.kubeconfig)
    args = ["run", "--standalone", "--all-namespaces", "-m", "hutch_operator.handlers"]
    with KopfRunner(args, timeout=60) as runner:
        time.sleep(1.0)  # the watch streams start
        yield runner
    assert runner.exception is None, runner.exception


@pytest.fixture(scope="module")
def operator(crds_applied: Any) -> Iterator[Any]:
    """One operator per test module on the apiserver tier."""
    with run_operator(crds_applied) as runner:
        yield runner


@pytest.fixture(scope="module")
def node_operator(node: Any) -> Iterator[Any]:
    """The operator in-process against the node plane, creating Brokers with our built image.

    The node tier's containerd holds only images built here (hutch_localkube.images), so the
    operator's default image is pointed at the local tag; ``brokerpods`` sets the broker
    addresses the operator dials, and they are cleared with it.
    """
    from hutch_testing import brokerpods

    os.environ["HUTCH_DEFAULT_BROKER_IMAGE"] = NODE_BROKER_IMAGE
    try:
        with run_operator(node):
            yield node
    finally:
        os.environ.pop("HUTCH_DEFAULT_BROKER_IMAGE", None)
        os.environ.pop(brokerpods.ADDRESSES, None)


def set_broker_address(namespace: str, name: str, broker: Any) -> None:
    entries = [e for e in os.environ.get("HUTCH_BROKER_ADDRESSES", "").split(",") if e]
    entries.append(f"{namespace}/{name}={broker.http_url}|{broker.amqp_url}")
    os.environ["HUTCH_BROKER_ADDRESSES"] = ",".join(entries)


class Helpers:
    """Helpers handed to test modules as a fixture (conftest is not importable by name)."""

    Kube = Kube
    ready = staticmethod(ready)
    wait_for = staticmethod(wait_for)
    set_broker_address = staticmethod(set_broker_address)
    run_operator = staticmethod(run_operator)


@pytest.fixture(scope="session")
def kit() -> type[Helpers]:
    return Helpers
