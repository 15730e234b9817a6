"""Pure tables for claims and ownership: endpoint keys, admitted claims, who may delete.

No cluster and no broker: these pin the decisions the control-plane tests in test_tenancy.py
exercise end to end.
"""

from __future__ import annotations

from typing import Any

import kopf
import pydantic
import pytest
from hutch_operator.core import errors, references
from hutch_operator.models import queues as queue_models
from hutch_operator.topology import conflicts, reconciling
from hutch_operator.topology.handlers import queues


@pytest.mark.parametrize(
    ("url", "key"),
    [
        ("http://hutch.ns.svc:15672", "http://hutch.ns.svc:15672"),
        ("http://hutch.ns.svc:15672/", "http://hutch.ns.svc:15672"),
        ("HTTP://Hutch.NS.svc.cluster.local:15672", "http://hutch.ns.svc:15672"),
        ("http://hutch.ns.svc.cluster.local.:15672/", "http://hutch.ns.svc:15672"),
        ("http://hutch.ns.svc.corp.example:15672", "http://hutch.ns.svc:15672"),
        ("http://guest:secret@hutch.ns.svc:15672", "http://hutch.ns.svc:15672"),
        ("http://rabbit.example.com", "http://rabbit.example.com:80"),
        ("https://rabbit.example.com/", "https://rabbit.example.com:443"),
        ("https://rabbit.example.com:443/mq/", "https://rabbit.example.com:443/mq"),
        ("http://127.0.0.1:15672", "http://127.0.0.1:15672"),
        ("http://[::1]:15672", "http://[::1]:15672"),
    ],
)
def test_endpoint_normalisation(url: str, key: str) -> None:
    assert references.normalise_endpoint(url) == key


def test_endpoint_normalisation_keeps_different_brokers_apart() -> None:
    keys = {
        references.normalise_endpoint(u)
        for u in ("http://a.ns.svc:15672", "http://a.other.svc:15672", "http://a.ns.svc:15673",
                  "https://a.ns.svc:15672")
    }  # fmt: skip
    assert len(keys) == 4


def test_bad_uri_is_connection_secret_invalid() -> None:
    with pytest.raises(errors.ConnectionSecretInvalidError):
        references.normalise_endpoint("http://host:notaport")


def _body(
    name: str,
    spec: dict[str, Any],
    *,
    namespace: str = "team-a",
    created: str = "t1",
    status: dict[str, Any] | None = None,
    deleting: bool = False,
) -> kopf.Body:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{namespace}-{name}",
                            "creationTimestamp": created}  # fmt: skip
    if deleting:
        meta["deletionTimestamp"] = "t9"
    raw: Any = {"metadata": meta, "spec": spec, "status": status or {}}
    return kopf.Body(raw)


def test_a_queue_reached_both_ways_claims_one_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Defect 1: brokerRef and connectionSecret to the same broker are one broker object."""
    monkeypatch.delenv("HUTCH_BROKER_ADDRESSES", raising=False)
    by_ref = _body("a", {"brokerRef": {"name": "hutch"}, "name": "shared"})
    by_secret = _body(
        "b", {"connectionSecret": {"name": "s"}, "name": "shared"}, created="t2",
        status={"brokerEndpoint": "http://hutch.team-a.svc:15672"},
    )  # fmt: skip
    [key_a] = reconciling.index_claim(queues.OPS, by_ref)
    [key_b] = reconciling.index_claim(queues.OPS, by_secret)
    assert key_a == key_b == ("http://hutch.team-a.svc:15672", "/", "queue", "shared")
    # The Secret's spelling with the cluster domain resolves to the same key.
    secret_key = references.normalise_endpoint("http://hutch.team-a.svc.cluster.local:15672")
    assert reconciling.claim_key(queues.OPS, secret_key, *_model_and_name(by_secret)) == key_a


def _model_and_name(body: kopf.Body) -> tuple[Any, str]:
    model = queue_models.QueueSpec.model_validate(dict(body.spec))
    return model, model.name or str(body.metadata.name)


def test_secret_claims_only_once_its_endpoint_is_recorded() -> None:
    body = _body("b", {"connectionSecret": {"name": "s"}})
    assert reconciling.index_claim(queues.OPS, body) == {}


def test_deleting_objects_claim_nothing_as_an_empty_mapping() -> None:
    """Defect 4: Kopf ignores a None index result (keeping the old claim); {} replaces it."""
    body = _body("a", {"brokerRef": {"name": "hutch"}}, deleting=True)
    result = reconciling.index_claim(queues.OPS, body)
    assert result == {} and result is not None


def test_index_keeps_claims_from_namespaces_it_cannot_judge() -> None:
    body = _body("p", {"brokerRef": {"name": "hutch", "namespace": "brokers"}}, namespace="dev")
    [claim] = reconciling.index_claim(queues.OPS, body).values()
    assert claim.broker == "brokers/hutch"


def _claim(ns: str, name: str, created: str, broker: str = "") -> conflicts.Claim:
    return conflicts.Claim(created, ns, name, f"uid-{ns}-{name}", broker)


def test_claims_from_namespaces_the_broker_does_not_admit_do_not_count() -> None:
    """Defect 3: an older claim from a namespace the Broker does not admit never wins."""
    facts = references.BrokerFacts("brokers", "hutch", True, False, ("team-a",))
    index = {("brokers", "hutch"): [facts]}
    admits = reconciling.admits(index)
    outsider = _claim("default", "payments", "t1", "brokers/hutch")
    tenant = _claim("team-a", "payments", "t2", "brokers/hutch")
    assert not admits(outsider) and admits(tenant)
    assert conflicts.owner([outsider, tenant], tenant, admits) == tenant
    # Without the allow-list check the older outsider would have won.
    assert conflicts.owner([outsider, tenant], tenant, lambda _: True) == outsider
    # Secret claims and claims on an unknown Broker count.
    assert admits(_claim("default", "x", "t1"))
    assert admits(_claim("default", "x", "t1", "elsewhere/gone"))


def test_claims_from_outside_the_vhost_owners_namespace_do_not_count() -> None:
    """A Vhost owns its vhost for its namespace: an older claim on a queue in it from another
    namespace (refused with NamespaceNotAllowed) must not block the owner's."""
    admits = reconciling.admits({}, "team-a")
    intruder = _claim("team-b", "orders", "t1")
    tenant = _claim("team-a", "orders", "t2")
    assert not admits(intruder) and admits(tenant)
    assert conflicts.owner([intruder, tenant], tenant, admits) == tenant
    assert reconciling.admits({})(intruder)  # no Vhost object owns the vhost: all count


def test_owner_includes_me_when_the_index_does_not_yet() -> None:
    me = _claim("team-a", "old", "t1")
    younger = _claim("team-a", "young", "t2")
    assert conflicts.owner([younger], me, lambda _: True) == me
    assert conflicts.owner([], me, lambda _: True) == me
    assert conflicts.owner([_claim("team-a", "older", "t0")], me, lambda _: True).name == "older"


READY_TRUE = [{"type": "Ready", "status": "True", "reason": "Declared"}]
READY_FALSE = [{"type": "Ready", "status": "False", "reason": "BrokerRejected"}]
EP = "http://hutch.ns.svc:15672"


@pytest.mark.parametrize(
    ("status", "endpoint", "owned"),
    [
        ({}, None, False),  # never reconciled
        ({"brokerEndpoint": EP, "conditions": READY_FALSE}, EP, False),  # declare refused
        ({"brokerEndpoint": EP, "conditions": READY_FALSE}, None, False),
        ({"brokerEndpoint": EP, "declared": True, "conditions": READY_TRUE}, EP, True),
        ({"brokerEndpoint": EP, "declared": True, "conditions": READY_FALSE}, EP, True),  # later
        ({"brokerEndpoint": EP, "declared": True}, "http://other:15672", False),  # moved
        ({"brokerEndpoint": EP, "declared": False, "conditions": READY_TRUE}, EP, False),
        ({"conditions": READY_TRUE}, EP, True),  # reconciled before ownership was recorded
        ({"conditions": READY_FALSE}, EP, False),
        ({"conditions": [{"type": "Ready", "status": "False", "reason": "ResourceConflict"}]},
         None, False),
    ],
)  # fmt: skip
def test_ownership(status: dict[str, Any], endpoint: str | None, owned: bool) -> None:
    """Defect 2: only a successful declare into this endpoint lets deletion delete."""
    assert conflicts.owns(status, endpoint) is owned


def test_names_over_255_bytes_are_refused_by_the_model() -> None:
    """Defect 5: 200 x 'é' is 200 characters (maxLength passes) but 400 bytes."""
    with pytest.raises(pydantic.ValidationError, match="not 400"):
        queue_models.QueueSpec.model_validate({"brokerRef": {"name": "b"}, "name": "é" * 200})
    ok = queue_models.QueueSpec.model_validate({"brokerRef": {"name": "b"}, "name": "é" * 127})
    assert ok.name is not None and len(ok.name.encode()) == 254


def test_names_over_255_bytes_are_invalid_spec_in_the_operator() -> None:
    """Objects admitted by a CRD from before the CEL byte rule get Ready=False InvalidSpec."""
    spec = {"brokerRef": {"name": "b"}, "name": "é" * 200}
    with pytest.raises(
        errors.SpecError, match=r"name: .*at most 255 bytes in UTF-8, not 400"
    ) as refused:
        reconciling.parse(queues.OPS, spec)
    assert refused.value.reason == "InvalidSpec"
