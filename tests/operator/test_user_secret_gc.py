"""A User's credentials Secret goes with the User: garbage collection, not an operator delete.

The workloads tier runs kube-controller-manager, whose garbage collector follows the Secret's
ownerReference to the User; the operator's RBAC has no ``delete`` on Secrets at all. The
broker is a real hutch-broker on loopback (the Broker's pod runs nowhere in this tier).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hutch_testing.brokers import HutchBroker

pytestmark = pytest.mark.timeout(150)


@pytest.fixture(scope="module")
def running(workloads: Any, kit: Any) -> Iterator[Any]:
    with kit.run_operator(workloads):
        yield workloads


def test_user_secret_is_garbage_collected_with_the_user(
    running: Any, kit: Any, tmp_path: Any
) -> None:
    kube = kit.Kube(running, running.create_namespace())
    with HutchBroker(work_dir=tmp_path / "hutch") as broker:
        kit.set_broker_address(kube.namespace, "b", broker)
        kube.secret("b-default-user", {"username": "guest", "password": "guest"})
        kube.create("Broker", "brokers", "b", {"persistence": {"size": "0"}})
        kube.create("User", "users", "app", {"brokerRef": {"name": "b"}})
        kit.wait_for(lambda: kit.ready(kube.get("users", "app")) == ("True", "Declared"), 60,
                     "User Declared")  # fmt: skip
        secret = kube.get_secret("app-user-credentials")
        assert secret is not None
        [owner] = secret["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"]) == ("User", "app")
        kube.delete("users", "app")
        kit.wait_for(lambda: kube.get_secret("app-user-credentials") is None, 60,
                     "the Secret collected with its User")  # fmt: skip
