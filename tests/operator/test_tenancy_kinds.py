"""Vhost, User and Permission on a real kube-apiserver, against hutch-broker and RabbitMQ 3.10.8.

The same CRs go to both brokers: to hutch-broker through a ``brokerRef`` (a Broker CR whose
address is the test broker), to the session's RabbitMQ through a ``connectionSecret``. What is
checked is what a tenant sees with a real client (pika over AMQP): the credentials Secret's URI
logs in, a Permission's regexes refuse the rest with 403 ACCESS_REFUSED, a vhost isolates, a
deleted User can no longer log in. The operator runs in-process and sweeps every 2 s.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pika
import pika.exceptions
import pytest
from hutch_demo import management
from hutch_testing.brokers import HutchBroker

pytestmark = pytest.mark.timeout(180)

BROKER = "tb"


@dataclass
class Side:
    """One broker as the tests drive it: its reference for CRs and an admin API client."""

    kind: str
    ref: dict[str, Any]
    mgmt: management.Management
    amqp_port: int

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        reply = self.mgmt.request(method, path, body)
        return reply.status, reply.body


@pytest.fixture(scope="module")
def plane(operator: Any, crds_applied: Any, kit: Any, tmp_path_factory: Any) -> Iterator[Any]:
    """One namespace with a Broker CR on a hutch-broker of its own, for the whole module."""
    broker = HutchBroker(work_dir=tmp_path_factory.mktemp("hutch")).start()
    kube = kit.Kube(crds_applied, crds_applied.create_namespace())
    kit.set_broker_address(kube.namespace, BROKER, broker)
    kube.secret(f"{BROKER}-default-user", {"username": "guest", "password": "guest"})
    kube.create("Broker", "brokers", BROKER, {"persistence": {"size": "0"}})
    kit.wait_for(
        lambda: kit.ready(kube.get("brokers", BROKER), "Available")[0] == "True", 30, "Available"
    )
    try:
        yield {"kube": kube, "hutch": broker}
    finally:
        broker.stop()


@pytest.fixture(params=["hutch", "rabbitmq"])
def side(request: Any, plane: dict[str, Any]) -> Side:
    if request.param == "hutch":
        broker = plane["hutch"]
        return Side("hutch", {"brokerRef": {"name": BROKER}}, management.Management(broker),
                    broker.amqp_port)  # fmt: skip
    node = request.getfixturevalue("rabbitmq")
    kube = plane["kube"]
    if kube.get_secret("rabbit") is None:
        kube.secret("rabbit", {"uri": node.http_url, "username": node.username,
                               "password": node.password, "amqp-uri": node.amqp_url})  # fmt: skip
    return Side("rabbitmq", {"connectionSecret": {"name": "rabbit"}},
                management.Management(node), node.amqp_port)  # fmt: skip


def _unique(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(3)}"


def _wait(kit: Any, kube: Any, plural: str, name: str, want: tuple[str, str]) -> Any:
    def check() -> Any:
        obj = kube.get(plural, name)
        return obj if kit.ready(obj) == want else None

    return kit.wait_for(check, 30, f"{plural}/{name} {want}")


def _credentials(kube: Any, user_object: str) -> dict[str, str]:
    secret = kube.get_secret(f"{user_object}-user-credentials")
    assert secret is not None
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def _connect(uri: str) -> pika.BlockingConnection:
    params = pika.URLParameters(uri)
    params.connection_attempts = 1
    params.socket_timeout = 5
    return pika.BlockingConnection(params)


def _tenant(kit: Any, kube: Any, side: Side, *, perms: tuple[str, str, str] = (".*",) * 3,
            tags: list[str] | None = None) -> dict[str, str]:  # fmt: skip
    """A Vhost, a User and a Permission, all Ready: the names and the credentials."""
    vhost, user = _unique("vh"), _unique("app")
    kube.create("Vhost", "vhosts", vhost, {**side.ref, "description": "team"})
    kube.create("User", "users", user, {**side.ref, "tags": tags or [], "uriVhost": vhost})
    configure, write, read = perms
    kube.create("Permission", "permissions", user,
                {**side.ref, "vhost": vhost, "user": user, "configure": configure,
                 "write": write, "read": read})  # fmt: skip
    for plural, name in (("vhosts", vhost), ("users", user), ("permissions", user)):
        _wait(kit, kube, plural, name, ("True", "Declared"))
    return {"vhost": vhost, "user": user, **_credentials(kube, user)}


def test_user_secret_logs_in_until_the_user_is_deleted(
    plane: dict[str, Any], side: Side, kit: Any, caplog: Any
) -> None:
    kube = plane["kube"]
    tenant = _tenant(kit, kube, side)
    assert tenant["username"] == tenant["user"] and len(tenant["password"]) >= 40
    assert tenant["amqp-uri"].endswith(f"@127.0.0.1:{side.amqp_port}/{tenant['vhost']}")
    connection = _connect(tenant["amqp-uri"])
    channel = connection.channel()
    channel.queue_declare("work")
    channel.basic_publish("", "work", b"hello")
    _, _, body = channel.basic_get("work", auto_ack=True)
    assert body == b"hello"
    connection.close()
    # The password is in the Secret only: not in the spec, status or events of the User.
    user = kube.get("users", tenant["user"])
    assert tenant["password"] not in json.dumps(user)
    assert tenant["password"] not in json.dumps(kube.events(tenant["user"]))
    assert tenant["password"] not in caplog.text  # the operator runs in-process: its logs
    assert user["status"]["credentialsSecret"] == f"{tenant['user']}-user-credentials"

    kube.delete("users", tenant["user"])
    kit.wait_for(lambda: kube.get("users", tenant["user"]) is None, 30, "User gone")
    assert side.call("GET", f"/users/{tenant['user']}")[0] == 404
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        _connect(tenant["amqp-uri"])


def test_permission_limits_what_the_user_may_do(
    plane: dict[str, Any], side: Side, kit: Any
) -> None:
    kube = plane["kube"]
    tenant = _tenant(kit, kube, side, perms=("^app\\.", "^app\\.", "^app\\."))
    connection = _connect(tenant["amqp-uri"])
    channel = connection.channel()
    channel.queue_declare("app.orders")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        channel.queue_declare("other.orders")
    assert refused.value.reply_code == 403
    assert "ACCESS_REFUSED" in refused.value.reply_text
    # Widened by a patch of the CR: the same user may now declare it.
    kube.patch_spec("permissions", tenant["user"], {"configure": ".*"})
    kit.wait_for(
        lambda: side.call("GET", f"/permissions/{tenant['vhost']}/{tenant['user']}")[1].get(
            "configure") == ".*", 20, "permission widened",
    )  # fmt: skip
    connection.channel().queue_declare("other.orders")
    connection.close()


def test_vhost_isolates_tenants(plane: dict[str, Any], side: Side, kit: Any) -> None:
    kube = plane["kube"]
    first, second = _tenant(kit, kube, side), _tenant(kit, kube, side)
    connection = _connect(first["amqp-uri"])
    connection.channel().queue_declare("private")
    connection.close()
    # The second team's user may not even open the first team's vhost.
    intruder = second["amqp-uri"].rsplit("/", 1)[0] + "/" + first["vhost"]
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        _connect(intruder)
    # And its own vhost has no such queue.
    channel = _connect(second["amqp-uri"]).channel()
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as missing:
        channel.queue_declare("private", passive=True)
    assert missing.value.reply_code == 404
    assert side.call("GET", f"/queues/{first['vhost']}/private")[0] == 200


def test_bad_input_is_refused_and_changes_nothing(
    plane: dict[str, Any], side: Side, kit: Any
) -> None:
    kube = plane["kube"]
    tenant = _tenant(kit, kube, side, perms=("^a", "^a", "^a"))
    path = f"/permissions/{tenant['vhost']}/{tenant['user']}"
    # What the apiserver can check is refused at admission (422), with the reason.
    refused = kube.patch_spec("permissions", tenant["user"], {"read": "(a)\\1"})
    assert refused.returncode != 0 and "backreferences" in refused.stderr
    refused = kube.patch_spec("permissions", tenant["user"], {"user": "someone-else"})
    assert refused.returncode != 0 and "user is immutable" in refused.stderr
    refused = kube.patch_spec("vhosts", tenant["vhost"], {"name": "renamed"})
    assert refused.returncode != 0 and "name is immutable" in refused.stderr
    refused = kube.patch_spec("users", tenant["user"], {"tags": ["a,b"]})
    assert refused.returncode != 0 and "commas" in refused.stderr
    # What only the broker can judge is BrokerRejected with its reason; the old grant stays.
    kube.patch_spec("permissions", tenant["user"], {"write": "("})
    obj = _wait(kit, kube, "permissions", tenant["user"], ("False", "BrokerRejected"))
    assert "400" in obj["status"]["conditions"][0]["message"]
    assert side.call("GET", path)[1]["write"] == "^a"
    # A Permission for a user that does not exist says which side is missing.
    name = _unique("ghost")
    kube.create("Permission", "permissions", name,
                {**side.ref, "vhost": tenant["vhost"], "user": name, "read": ".*"})  # fmt: skip
    obj = _wait(kit, kube, "permissions", name, ("False", "DependencyNotFound"))
    message = obj["status"]["conditions"][0]["message"]
    assert f"user '{name}' not found" in message and "vhost" not in message.split(" not")[0]


def test_existing_vhost_and_user_are_not_taken_over(
    plane: dict[str, Any], side: Side, kit: Any
) -> None:
    kube = plane["kube"]
    vhost, user = _unique("pre"), _unique("preuser")
    assert side.call("PUT", f"/vhosts/{vhost}", {"description": "theirs"})[0] == 201
    assert side.call("PUT", f"/users/{user}", {"password": "theirs", "tags": ""})[0] == 201
    kube.create("Vhost", "vhosts", vhost, {**side.ref, "description": "mine"})
    kube.create("User", "users", user, side.ref)
    obj = _wait(kit, kube, "vhosts", vhost, ("False", "AlreadyExists"))
    assert "adopt" in obj["status"]["conditions"][0]["message"]
    _wait(kit, kube, "users", user, ("False", "AlreadyExists"))
    assert side.call("GET", f"/vhosts/{vhost}")[1]["description"] == "theirs"
    assert kube.get_secret(f"{user}-user-credentials") is None
    # Deleting the refused objects leaves the broker's vhost and user alone.
    kube.delete("vhosts", vhost)
    kube.delete("users", user)
    kit.wait_for(lambda: kube.get("users", user) is None, 30, "User gone")
    kit.wait_for(lambda: kube.get("vhosts", vhost) is None, 30, "Vhost gone")
    assert side.call("GET", f"/vhosts/{vhost}")[0] == 200
    assert side.call("GET", f"/users/{user}")[0] == 200
    # Stated adoption manages (and then deletes) it.
    kube.create("Vhost", "vhosts", f"{vhost}-a", {**side.ref, "name": vhost, "adopt": True,
                                                  "description": "mine"})  # fmt: skip
    _wait(kit, kube, "vhosts", f"{vhost}-a", ("True", "Declared"))
    assert side.call("GET", f"/vhosts/{vhost}")[1]["description"] == "mine"
    kube.delete("vhosts", f"{vhost}-a")
    kit.wait_for(lambda: side.call("GET", f"/vhosts/{vhost}")[0] == 404, 30, "adopted deleted")
    side.call("DELETE", f"/users/{user}")


def test_the_vhost_column_shows_the_effective_name(
    plane: dict[str, Any], side: Side, kit: Any
) -> None:
    """Issue 31 item 3: ``kubectl get vhosts`` showed an empty VHOST for every Vhost whose
    ``spec.name`` defaults to ``metadata.name``; the column now reads ``status.name``."""
    kube = plane["kube"]
    plain, named, other = _unique("col"), _unique("colobj"), _unique("colname")
    kube.create("Vhost", "vhosts", plain, side.ref)
    kube.create("Vhost", "vhosts", named, {**side.ref, "name": other})
    for name in (plain, named):
        _wait(kit, kube, "vhosts", name, ("True", "Declared"))
    listed = kube.plane.kubectl("-n", kube.namespace, "get", "vhosts.hutch.dev", plain, named)
    header, *rows = [line.split() for line in listed.stdout.splitlines()]
    assert header[:3] == ["NAME", "READY", "VHOST"], listed.stdout
    assert {row[0]: row[2] for row in rows} == {plain: plain, named: other}, listed.stdout
    for name in (plain, named):
        kube.delete("vhosts", name)
    for name in (plain, named):
        kit.wait_for(lambda n=name: kube.get("vhosts", n) is None, 30, f"{name} gone")


def test_deleting_a_vhost_with_queues_is_deliberate(
    plane: dict[str, Any], side: Side, kit: Any
) -> None:
    kube = plane["kube"]
    tenant = _tenant(kit, kube, side)
    connection = _connect(tenant["amqp-uri"])
    channel = connection.channel()
    channel.queue_declare("keep", durable=True)
    channel.basic_publish("", "keep", b"1")
    connection.close()
    kube.delete("vhosts", tenant["vhost"])
    kit.wait_for(lambda: kube.get("vhosts", tenant["vhost"]) is None, 30, "Vhost CR gone")
    kube.wait_reason(tenant["vhost"], "DeleteSkippedNotEmpty")
    assert side.call("GET", f"/queues/{tenant['vhost']}/keep")[0] == 200
    # deleteIfEmpty: false is the deliberate act: vhost, queue and message go.
    again = _unique("vhd")
    kube.create("Vhost", "vhosts", again, {**side.ref, "name": tenant["vhost"], "adopt": True,
                                          "deleteIfEmpty": False})  # fmt: skip
    _wait(kit, kube, "vhosts", again, ("True", "Declared"))
    kube.delete("vhosts", again)
    kit.wait_for(
        lambda: side.call("GET", f"/vhosts/{tenant['vhost']}")[0] == 404, 30, "vhost deleted"
    )


def test_password_rotates_when_the_secret_changes(
    plane: dict[str, Any], side: Side, kit: Any
) -> None:
    kube = plane["kube"]
    tenant = _tenant(kit, kube, side)
    name = f"{tenant['user']}-user-credentials"
    new_password = "rotated-" + secrets.token_hex(8)
    encoded = base64.b64encode(new_password.encode()).decode()
    kube.plane.kubectl("-n", kube.namespace, "patch", "secret", name, "--type=merge",
                       "-p", json.dumps({"data": {"password": encoded}}))  # fmt: skip

    def rotated() -> bool:
        data = _credentials(kube, tenant["user"])
        if data["password"] != new_password or new_password not in data["amqp-uri"]:
            return False
        try:
            _connect(data["amqp-uri"]).close()
        except pika.exceptions.AMQPConnectionError:
            return False
        return True

    kit.wait_for(rotated, 30, "the new password logs in")
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        _connect(tenant["amqp-uri"])  # the old one no longer does
    # A deleted Secret means a new generated password, which logs in; the last one does not.
    kube.plane.api("DELETE", f"/api/v1/namespaces/{kube.namespace}/secrets/{name}")

    def regenerated() -> dict[str, str] | None:
        if kube.get_secret(name) is None:
            return None
        data = _credentials(kube, tenant["user"])
        try:
            _connect(data["amqp-uri"]).close()
        except pika.exceptions.AMQPConnectionError:
            return None
        return data

    data = kit.wait_for(regenerated, 30, "a regenerated password that logs in")
    assert data["password"] != new_password and len(data["password"]) >= 40
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        _connect(tenant["amqp-uri"].replace(tenant["password"], new_password))


def test_imported_credentials(plane: dict[str, Any], side: Side, kit: Any) -> None:
    kube = plane["kube"]
    user, password = _unique("imp"), "pa ss/w@rd:" + secrets.token_hex(4)
    kube.secret(f"{user}-own", {"password": password})
    kube.create("User", "users", user,
                {**side.ref, "importCredentialsSecret": {"name": f"{user}-own"}})  # fmt: skip
    kube.create("Permission", "permissions", user, {**side.ref, "user": user, "read": ".*"})
    _wait(kit, kube, "users", user, ("True", "Declared"))
    _wait(kit, kube, "permissions", user, ("True", "Declared"))
    data = _credentials(kube, user)
    assert data["password"] == password
    _connect(data["amqp-uri"]).close()  # percent-encoded in the URI, so pika gets it back
    # A username in the imported Secret that names someone else is refused, nothing sent.
    other = _unique("imp")
    kube.secret(f"{other}-own", {"username": "admin", "password": "x"})
    kube.create("User", "users", other,
                {**side.ref, "importCredentialsSecret": {"name": f"{other}-own"}})  # fmt: skip
    _wait(kit, kube, "users", other, ("False", "CredentialsSecretInvalid"))
    assert side.call("GET", f"/users/{other}")[0] == 404


def test_topic_permission_limits_routing_keys(plane: dict[str, Any], side: Side, kit: Any) -> None:
    kube = plane["kube"]
    tenant = _tenant(kit, kube, side)
    user, vhost = tenant["user"], tenant["vhost"]
    connection = _connect(tenant["amqp-uri"])
    setup = connection.channel()
    for exchange in ("events", "audit", "pre"):
        setup.exchange_declare(exchange, "topic")
    setup.queue_declare("mine")
    base = {**side.ref, "vhost": vhost, "user": user}
    kube.create("TopicPermission", "topicpermissions", f"{user}-events",
                {**base, "exchange": "events", "write": "^team\\.", "read": "^team\\."})  # fmt: skip
    kube.create("TopicPermission", "topicpermissions", f"{user}-audit",
                {**base, "exchange": "audit", "write": "^{username}$", "read": ""})  # fmt: skip
    for name in (f"{user}-events", f"{user}-audit"):
        _wait(kit, kube, "topicpermissions", name, ("True", "Declared"))

    def outcome(action: Any) -> int | None:
        channel = connection.channel()
        channel.confirm_delivery()
        try:
            action(channel)
        except pika.exceptions.ChannelClosedByBroker as exc:
            topic = "ACCESS_REFUSED - access to topic" in exc.reply_text
            return int(exc.reply_code) if topic else -1
        return None

    assert outcome(lambda ch: ch.basic_publish("events", "team.created", b"1")) is None
    assert outcome(lambda ch: ch.basic_publish("events", "other.created", b"1")) == 403
    assert outcome(lambda ch: ch.queue_bind("mine", "events", "team.#")) is None
    assert outcome(lambda ch: ch.queue_bind("mine", "events", "#")) == 403
    assert outcome(lambda ch: ch.basic_publish("audit", user, b"1")) is None
    assert outcome(lambda ch: ch.basic_publish("audit", "someone", b"1")) == 403
    # Deleting one exchange's topic permission keeps the other exchange's.
    kube.delete("topicpermissions", f"{user}-events")
    kit.wait_for(lambda: kube.get("topicpermissions", f"{user}-events") is None, 30, "gone")
    assert outcome(lambda ch: ch.basic_publish("events", "other.created", b"1")) is None
    assert outcome(lambda ch: ch.basic_publish("audit", "someone", b"1")) == 403
    listed = side.call("GET", f"/topic-permissions/{vhost}/{user}")[1]
    assert [item["exchange"] for item in listed] == ["audit"]
    # One made by hand is not taken over.
    body = {"exchange": "pre", "write": "^x", "read": "^x"}
    assert side.call("PUT", f"/topic-permissions/{vhost}/{user}", body)[0] == 204
    kube.create("TopicPermission", "topicpermissions", f"{user}-pre",
                {**base, "exchange": "pre", "write": ".*", "read": ".*"})  # fmt: skip
    _wait(kit, kube, "topicpermissions", f"{user}-pre", ("False", "AlreadyExists"))
    assert outcome(lambda ch: ch.basic_publish("pre", "y", b"1")) == 403
    connection.close()


def test_vhost_and_user_limits_change_in_place(plane: dict[str, Any], side: Side, kit: Any) -> None:
    kube = plane["kube"]
    tenant = _tenant(kit, kube, side)
    vhost, user = tenant["vhost"], tenant["user"]
    kube.patch_spec("vhosts", vhost, {"limits": {"maxQueues": 1}})
    kube.patch_spec("users", user, {"limits": {"maxConnections": 1}})
    kit.wait_for(lambda: side.call("GET", f"/vhost-limits/{vhost}")[1]
                 == [{"vhost": vhost, "value": {"max-queues": 1}}], 20, "vhost limit")  # fmt: skip
    kit.wait_for(lambda: side.call("GET", f"/user-limits/{user}")[1]
                 == [{"user": user, "value": {"max-connections": 1}}], 20, "user limit")  # fmt: skip
    connection = _connect(tenant["amqp-uri"])
    channel = connection.channel()
    channel.queue_declare("first")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
        channel.queue_declare("second")
    assert refused.value.reply_code == 406 and "limit" in refused.value.reply_text
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        _connect(tenant["amqp-uri"])  # the user's second connection
    # Raised and then removed by patching the CR; the vhost and its queue stay.
    kube.patch_spec("vhosts", vhost, {"limits": {"maxQueues": None}})
    kit.wait_for(lambda: side.call("GET", f"/vhost-limits/{vhost}")[1] == [], 20, "no limit")
    connection.channel().queue_declare("second")
    assert side.call("GET", f"/queues/{vhost}/first")[0] == 200
    connection.close()


def test_steady_objects_are_not_drift(plane: dict[str, Any], side: Side, kit: Any) -> None:
    """Three sweeps (every 2 s) over unchanged objects correct nothing and write nothing."""
    kube = plane["kube"]
    tenant = _tenant(kit, kube, side, tags=["management"])
    user = tenant["user"]
    kube.create("TopicPermission", "topicpermissions", f"{user}-t",
                {**side.ref, "vhost": tenant["vhost"], "user": user, "exchange": "amq.topic",
                 "write": "^a", "read": ""})  # fmt: skip
    kube.patch_spec("vhosts", tenant["vhost"], {"limits": {"maxQueues": 5}, "tags": ["t"]})
    kube.patch_spec("users", user, {"limits": {"maxChannels": 5}})
    _wait(kit, kube, "topicpermissions", f"{user}-t", ("True", "Declared"))
    kit.wait_for(lambda: side.call("GET", f"/user-limits/{user}")[1] != [], 20, "user limit")
    versions = {name: kube.get_secret(f"{user}-user-credentials")["metadata"]["resourceVersion"]
                for name in ("before",)}  # fmt: skip
    time.sleep(7)
    for name in (tenant["vhost"], user, f"{user}-t"):
        assert "DriftCorrected" not in kube.reasons(name), kube.events(name)
    after = kube.get_secret(f"{user}-user-credentials")["metadata"]["resourceVersion"]
    assert after == versions["before"]  # the Secret is not rewritten either


def test_two_users_for_one_name_conflict(plane: dict[str, Any], side: Side, kit: Any) -> None:
    """Users are broker-wide: the younger of two objects naming one user never touches it."""
    kube = plane["kube"]
    name = _unique("shared")
    kube.create("User", "users", f"{name}-a", {**side.ref, "name": name})
    _wait(kit, kube, "users", f"{name}-a", ("True", "Declared"))
    first = _credentials(kube, f"{name}-a")
    time.sleep(1.1)  # creationTimestamp has one-second resolution
    kube.create("User", "users", f"{name}-b", {**side.ref, "name": name})
    obj = _wait(kit, kube, "users", f"{name}-b", ("False", "ResourceConflict"))
    assert obj["status"]["conflictWith"] == f"{kube.namespace}/{name}-a"
    assert kube.get_secret(f"{name}-b-user-credentials") is None
    # Still a's password: the login passes and only the vhost is refused (530, not 403).
    with pytest.raises(pika.exceptions.ProbableAccessDeniedError):
        _connect(first["amqp-uri"])
