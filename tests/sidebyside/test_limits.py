"""Vhost and user limits side by side with RabbitMQ 3.10.8 (issue 14: "Limits").

Each test gets its own vhost and user (names private to the test, removed afterwards), so a
limit never touches the shared RabbitMQ node's default vhost or other tests.
"""

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from hutch_demo.management import quote
from hutch_demo.waiting import wait_for
from pika.exceptions import (
    ChannelClosedByBroker,
    ConnectionClosedByBroker,
    ProbableAccessDeniedError,
)

pytestmark = pytest.mark.rabbitmq

ALL = {"configure": ".*", "write": ".*", "read": ".*"}
NOT_FOUND = {"error": "Object Not Found", "reason": "Not Found"}


@dataclass
class Tenant:
    target: object
    vhost: str
    user: str
    password: str = "pw"

    def connect(self, user: str | None = None):
        if user is None:
            return self.target.connect(vhost=self.vhost)
        return self.target.connect(vhost=self.vhost, user=user, password=self.password)


@pytest.fixture
def tenant(target) -> Iterator[Tenant]:
    api = target.api
    side = Tenant(target, vhost=target.name("vh"), user=target.name("bob"))
    assert api.put(f"/vhosts/{quote(side.vhost)}", {}).status == 201
    assert api.put(f"/permissions/{quote(side.vhost)}/guest", ALL).ok
    assert api.put(f"/users/{quote(side.user)}", {"password": side.password, "tags": ""}).ok
    assert api.put(f"/permissions/{quote(side.vhost)}/{quote(side.user)}", ALL).ok
    yield side
    target.cleanup()  # its connections first: a vhost's deletion would close them anyway
    api.delete(f"/vhosts/{quote(side.vhost)}")
    api.delete(f"/users/{quote(side.user)}")


def _once_counted_out(connect):
    """``connect()`` once a closed connection no longer counts against a limit.

    RabbitMQ 3.10.8 forgets a closed connection (and its channels) in a process spawned from
    the connection_closed event, after close-ok, so a connect at once may still be refused.
    """

    def attempt():
        try:
            return connect()
        except ProbableAccessDeniedError:
            return None

    return wait_for(attempt, what="the closed connection counted out")


def _refusal(excinfo) -> str:
    """The close text of a refused connection open (pika wraps it in the access error)."""
    return str(excinfo.value)


def test_vhost_limits_api_shapes_and_refusals(target, tenant):
    api, vh = target.api, quote(tenant.vhost)
    assert api.get("/vhost-limits").body == [] or all(
        item["vhost"] != tenant.vhost for item in api.get("/vhost-limits").body
    )
    assert api.get(f"/vhost-limits/{vh}").body == []
    assert api.put(f"/vhost-limits/{vh}/max-connections", {"value": 10}).status == 204
    assert api.put(f"/vhost-limits/{vh}/max-queues", {"value": -1}).status == 204
    listed = api.get(f"/vhost-limits/{vh}")
    assert listed.status == 200
    assert listed.body == [
        {"vhost": tenant.vhost, "value": {"max-connections": 10, "max-queues": -1}}
    ]
    assert listed.body[0] in api.get("/vhost-limits").body

    unknown = api.put(f"/vhost-limits/{vh}/max-foo", {"value": 1})
    assert unknown.status == 400
    assert unknown.body["reason"] == (
        'Validation failed\n\nUnrecognised terms [{<<"max-foo">>,1}] in limits\n'
    )
    for value, shown in (("x", '<<"x">>'), (1.5, "1.5"), (True, "true")):
        bad = api.put(f"/vhost-limits/{vh}/max-queues", {"value": value})
        assert bad.status == 400
        assert bad.body["reason"] == (
            f"Validation failed\n\nmax-queues should be a number, actually was {shown}\n"
        )
    missing_value = api.put(f"/vhost-limits/{vh}/max-queues", {})
    assert (missing_value.status, missing_value.body["reason"]) == (400, "[{key_missing,value}]")
    no_vhost = api.put(f"/vhost-limits/{quote(target.name('none'))}/max-queues", {"value": 1})
    assert (no_vhost.status, no_vhost.body) == (
        404,
        {"error": "not_found", "reason": "vhost_not_found"},
    )
    assert api.get(f"/vhost-limits/{quote(target.name('none'))}").body == NOT_FOUND
    # Refused PUTs changed nothing.
    assert api.get(f"/vhost-limits/{vh}").body[0]["value"] == {
        "max-connections": 10,
        "max-queues": -1,
    }

    exported = [
        item
        for item in api.get("/definitions").body["parameters"]
        if item.get("component") == "vhost-limits" and item["vhost"] == tenant.vhost
    ]
    assert exported == [
        {
            "value": {"max-connections": 10, "max-queues": -1},
            "vhost": tenant.vhost,
            "component": "vhost-limits",
            "name": "limits",
        }
    ]
    assert api.delete(f"/vhost-limits/{vh}/max-connections").status == 204
    assert api.delete(f"/vhost-limits/{vh}/max-connections").status == 204  # idempotent
    assert api.delete(f"/vhost-limits/{vh}/max-queues").status == 204
    assert api.get(f"/vhost-limits/{vh}").body == []


def test_vhost_max_connections_refuses_the_next_connection(target, tenant):
    api, vh = target.api, quote(tenant.vhost)
    assert api.put(f"/vhost-limits/{vh}/max-connections", {"value": 2}).ok
    first, second = tenant.connect(), tenant.connect(tenant.user)  # any user counts
    with pytest.raises(ProbableAccessDeniedError) as refused:
        tenant.connect()
    assert (
        f"(530) \"NOT_ALLOWED - access to vhost '{tenant.vhost}' refused for user 'guest': "
        'connection limit (2) is reached"'
    ) in _refusal(refused)
    assert first.is_open and second.is_open  # the limit refuses new ones, closes nothing
    second.close()
    _once_counted_out(tenant.connect).close()  # room again
    assert api.put(f"/vhost-limits/{vh}/max-connections", {"value": 0}).ok
    with pytest.raises(ProbableAccessDeniedError) as nothing:
        tenant.connect()
    assert "connection limit (0) is reached" in _refusal(nothing)
    assert first.is_open
    assert api.put(f"/vhost-limits/{vh}/max-connections", {"value": -1}).ok  # negative: none
    tenant.connect().close()
    target.connect().close()  # other vhosts never counted


def test_vhost_max_queues_refuses_new_queues_only(target, tenant):
    api, vh = target.api, quote(tenant.vhost)
    channel = tenant.connect().channel()
    channel.queue_declare("kept", durable=True)
    assert api.put(f"/vhost-limits/{vh}/max-queues", {"value": 1}).ok
    channel.queue_declare("kept", durable=True)  # an existing queue is no new queue
    with pytest.raises(ChannelClosedByBroker) as refused:
        channel.queue_declare("extra")
    assert refused.value.args == (
        406,
        f"PRECONDITION_FAILED - cannot declare queue 'extra': queue limit in vhost "
        f"'{tenant.vhost}' (1) is reached",
    )
    channel = tenant.connect().channel()
    with pytest.raises(ChannelClosedByBroker) as exclusive:
        channel.queue_declare("", exclusive=True)  # server-named and exclusive count too
    assert exclusive.value.args[0] == 406
    assert "queue limit in vhost" in exclusive.value.args[1]
    over_http = api.put(f"/queues/{vh}/by-http", {"durable": True})
    assert over_http.status == 400
    assert f"queue limit in vhost '{tenant.vhost}' (1) is reached" in over_http.body["reason"]
    assert not api.queue_exists("extra", tenant.vhost)
    assert not api.queue_exists("by-http", tenant.vhost)
    assert api.put(f"/vhost-limits/{vh}/max-queues", {"value": 2}).ok
    tenant.connect().channel().queue_declare("extra")


def test_user_limits_api_and_enforcement(target, tenant):
    api, user = target.api, quote(tenant.user)
    assert api.get(f"/user-limits/{user}").body == []
    assert api.put(f"/user-limits/{user}/max-connections", {"value": 1}).status == 204
    assert api.put(f"/user-limits/{user}/max-channels", {"value": 2}).status == 204
    assert api.get(f"/user-limits/{user}").body == [
        {"user": tenant.user, "value": {"max-connections": 1, "max-channels": 2}}
    ]
    assert api.get(f"/users/{user}").body["limits"] == {"max-connections": 1, "max-channels": 2}
    unknown = api.put(f"/user-limits/{user}/max-foo", {"value": 1})
    assert (unknown.status, unknown.body["reason"]) == (
        400,
        'Unrecognised terms [{<<"max-foo">>,1}] in user-limits',
    )
    bad = api.put(f"/user-limits/{user}/max-channels", {"value": "x"})
    assert (bad.status, bad.body["reason"]) == (
        400,
        'max-channels should be a number, actually was <<"x">>',
    )
    nobody = target.name("nobody")
    missing = api.put(f"/user-limits/{quote(nobody)}/max-channels", {"value": 1})
    assert (missing.status, missing.body) == (
        400,
        {"error": "bad_request", "reason": ["no_such_user", nobody]},
    )
    assert api.get(f"/user-limits/{quote(nobody)}").body == NOT_FOUND

    connection = tenant.connect(tenant.user)
    with pytest.raises(ProbableAccessDeniedError) as refused:
        tenant.connect(tenant.user)
    assert (
        f"(530) \"NOT_ALLOWED - connection refused for user '{tenant.user}': user connection "
        'limit (1) is reached"'
    ) in _refusal(refused)
    tenant.connect().close()  # guest is not limited
    connection.channel()
    connection.channel()
    with pytest.raises(ConnectionClosedByBroker) as third:
        connection.channel()
    assert third.value.args == (
        530,
        f"NOT_ALLOWED - number of channels opened for user '{tenant.user}' has reached the "
        "maximum allowed user limit of (2)",
    )

    # Channels count across the user's connections, and a change applies at once.
    assert api.put(f"/user-limits/{user}/max-connections", {"value": 2}).ok
    first = tenant.connect(tenant.user)
    second = _once_counted_out(lambda: tenant.connect(tenant.user))  # the 530 closed the other
    first.channel()
    second.channel()
    with pytest.raises(ConnectionClosedByBroker) as across:
        first.channel()
    assert "maximum allowed user limit of (2)" in across.value.args[1]
    assert api.put(f"/user-limits/{user}/max-channels", {"value": 3}).ok
    second.channel()

    assert api.delete(f"/user-limits/{user}/max-channels").status == 204
    assert api.delete(f"/user-limits/{user}/max-channels").status == 204
    assert api.get(f"/user-limits/{user}").body == [
        {"user": tenant.user, "value": {"max-connections": 2}}
    ]
    exported = {u["name"]: u for u in api.get("/definitions").body["users"]}
    assert exported[tenant.user]["limits"] == {"max-connections": 2}
    # Changing the password keeps the limits.
    assert api.put(f"/users/{user}", {"password": "pw2", "tags": ""}).ok
    assert api.get(f"/users/{user}").body["limits"] == {"max-connections": 2}
