"""Pure tenancy translators (tenancy.py): tables of spec → request and listing → differences."""

from __future__ import annotations

import urllib.parse
from typing import Any

import pytest
from hutch_operator.core import errors
from hutch_operator.models import permissions, topicpermissions, users, vhosts
from hutch_operator.topology import tenancy

REF = {"brokerRef": {"name": "b"}}


def _vhost(**spec: Any) -> vhosts.VhostSpec:
    return vhosts.VhostSpec.model_validate({**REF, **spec})


def test_vhost_put() -> None:
    request = tenancy.vhost_put(_vhost(description="d", tags=["a"]), "team a", hutch=True)
    assert (request.method, request.path) == ("PUT", "/api/vhosts/team%20a")
    assert request.body == {"description": "d", "tags": ["a"]}
    typed = tenancy.vhost_put(_vhost(defaultQueueType="quorum"), "v", hutch=False)
    assert typed.body == {"description": "", "tags": [], "default_queue_type": "quorum"}
    quorum = tenancy.vhost_put(_vhost(defaultQueueType="quorum"), "v", hutch=True)
    assert quorum.body["default_queue_type"] == "quorum"
    with pytest.raises(errors.SpecError, match="classic and quorum queues"):
        tenancy.vhost_put(_vhost(defaultQueueType="stream"), "v", hutch=True)


@pytest.mark.parametrize(
    ("spec", "listed", "expected"),
    [
        ({}, {"description": "", "tags": []}, ([], [])),
        ({"tags": ["b", "a"]}, {"description": "", "tags": ["a", "b"]}, ([], [])),
        ({"description": "x"}, {"description": "y", "tags": ["t"]}, (["description", "tags"], [])),
        # RabbitMQ 3.10.8 reports "undefined" whatever it was given: not a mismatch.
        ({"defaultQueueType": "quorum"}, {"default_queue_type": "undefined"}, ([], [])),
        ({"defaultQueueType": "quorum"}, {"default_queue_type": "classic"},
         ([], ["default_queue_type"])),
    ],
)  # fmt: skip
def test_vhost_differences(
    spec: dict[str, Any], listed: dict[str, Any], expected: tuple[list[str], list[str]]
) -> None:
    assert tenancy.vhost_differences(_vhost(**spec), listed) == expected


def test_vhost_contents() -> None:
    assert tenancy.vhost_contents([{"messages": 3}, {"messages": None}, {}]) == (3, 3)
    assert tenancy.vhost_contents([]) == (0, 0)


def test_user_put_and_differences() -> None:
    spec = users.UserSpec.model_validate({**REF, "tags": ["monitoring"]})
    request = tenancy.user_put(spec, "app", "pw")
    assert request.body == {"password": "pw", "tags": ["monitoring"]}
    assert tenancy.user_differences(spec, {"tags": ["monitoring"]}) == []
    assert tenancy.user_differences(spec, {"tags": "monitoring"}) == []
    assert tenancy.user_differences(spec, {"tags": []}) == ["tags"]


@pytest.mark.parametrize(
    ("management", "amqp", "expected"),
    [
        ("http://b.ns.svc:15672", "amqp://b.ns.svc:5672", "amqp://b.ns.svc:5672"),
        ("http://127.0.0.1:8080", None, "amqp://127.0.0.1:5672"),
        ("http://x:1", "amqp://guest:guest@10.0.0.1:5673/%2F", "amqp://10.0.0.1:5673"),
        ("http://[::1]:15672", None, "amqp://[::1]:5672"),
    ],
)
def test_amqp_base(management: str, amqp: str | None, expected: str) -> None:
    assert tenancy.amqp_base(management, amqp) == expected


def test_credentials_data_encodes_what_a_uri_cannot_hold() -> None:
    data = tenancy.credentials_data("a@b", "p:w/d @", "amqp://h:5672", "/")
    assert data["amqp-uri"] == "amqp://a%40b:p%3Aw%2Fd%20%40@h:5672/%2F"
    parsed = urllib.parse.urlsplit(data["amqp-uri"])
    assert urllib.parse.unquote(parsed.password or "") == "p:w/d @"
    assert {k: data[k] for k in ("username", "password", "host", "amqp-port", "vhost")} == {
        "username": "a@b", "password": "p:w/d @", "host": "h", "amqp-port": "5672", "vhost": "/",
    }  # fmt: skip


def test_permission_put_and_differences() -> None:
    spec = permissions.PermissionSpec.model_validate(
        {**REF, "vhost": "v", "user": "u", "configure": "^a", "read": ".*"}
    )
    request = tenancy.permission_put(spec)
    assert (request.path, request.body) == (
        "/api/permissions/v/u", {"configure": "^a", "write": "", "read": ".*"},
    )  # fmt: skip
    listed = {"configure": "^a", "write": "", "read": "^b"}
    assert tenancy.permission_differences(spec, listed) == ["read"]


def test_topic_permission_delete_puts_the_other_exchanges_back() -> None:
    spec = topicpermissions.TopicPermissionSpec.model_validate(
        {**REF, "vhost": "v", "user": "u", "exchange": "events", "write": "^a"}
    )
    assert tenancy.topic_permission_put(spec).body == {"exchange": "events", "write": "^a",
                                                        "read": ""}  # fmt: skip
    listed = [
        {"vhost": "v", "user": "u", "exchange": "events", "write": "^a", "read": ""},
        {"vhost": "v", "user": "u", "exchange": "audit", "write": "^b", "read": "^c"},
    ]
    assert tenancy.topic_permission_of(listed, "v", "u", "audit") == listed[1]
    assert tenancy.topic_permission_of(listed, "v", "x", "audit") is None
    assert tenancy.topic_permission_differences(spec, listed[0]) == []
    requests = tenancy.topic_permission_delete(spec, listed)
    assert [(r.method, r.path, r.body) for r in requests] == [
        ("DELETE", "/api/topic-permissions/v/u", None),
        ("PUT", "/api/topic-permissions/v/u", {"exchange": "audit", "write": "^b", "read": "^c"}),
    ]


def test_broker_wide_tags_only_in_the_brokers_namespace() -> None:
    tags = ["administrator", "management", "monitoring"]
    remote = users.UserSpec.model_validate(
        {"brokerRef": {"name": "b", "namespace": "messaging"}, "tags": tags}
    )
    assert tenancy.broker_wide_tags(remote, "team-a") == ["administrator", "monitoring"]
    assert tenancy.broker_wide_tags(remote, "messaging") == []
    local = users.UserSpec.model_validate({**REF, "tags": tags})
    assert tenancy.broker_wide_tags(local, "team-a") == []
    secret = users.UserSpec.model_validate({"connectionSecret": {"name": "s"}, "tags": tags})
    assert tenancy.broker_wide_tags(secret, "team-a") == []


def test_limit_requests() -> None:
    spec = vhosts.VhostSpec.model_validate({**REF, "limits": {"maxQueues": 2}})
    wanted = tenancy.limit_values(spec.limits)
    assert wanted == {"max-queues": 2}
    current = tenancy.listed_limits([{"vhost": "v", "value": {"max-connections": 5}}])
    requests = tenancy.limit_requests("/api/vhost-limits/v", wanted, current)
    assert [(r.method, r.path, r.body) for r in requests] == [
        ("PUT", "/api/vhost-limits/v/max-queues", {"value": 2}),
        ("DELETE", "/api/vhost-limits/v/max-connections", None),
    ]
    assert tenancy.limit_requests("/x", wanted, wanted) == []
    assert tenancy.listed_limits([]) == {}
