"""hutchctl side by side with rabbitmqctl (issue 27 part 1).

The same command sequence runs through ``rabbitmqctl`` on the reference RabbitMQ 3.10.8 node and
through the installed ``hutchctl`` console script on hutch-broker; both brokers' management APIs
must then read back the same policies, operator policies, parameters, users, permissions and
limits, a few listings must print the same text, and the same mistakes must give the same exit
codes. Every name is private to the test (the RabbitMQ node is shared) and removed afterwards.
"""

import json
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import pytest
from hutch_demo import ports
from hutch_demo.management import Management, quote

# A rabbitmqctl call starts an Erlang VM: about 0.6-0.8 s of CPU and 1-2 s of wall time on the
# shared 2-core machine, up to a minute at load 20; a test makes up to 40 of them. `slow`: the
# module's four tests take a minute or more, so the parallel pass hands it out among the long
# modules first (hutch_testing.modorder), not last by its number of tests.
pytestmark = [pytest.mark.rabbitmq, pytest.mark.slow, pytest.mark.timeout(300)]
CALL_TIMEOUT_S = 120.0  # one call's bound, a guard against a hung CLI, not a measure

# Independent calls run at most this many at once. Each rabbitmqctl listens on one of the CLI's
# 11 distribution ports (35672-35682, rabbitmq-env's default), so far fewer than 11.
AT_ONCE = 4

T = TypeVar("T")

HUTCHCTL = shutil.which("hutchctl", path=str(Path(sys.executable).parent))


class Ctl:
    """rabbitmqctl on the RabbitMQ node, hutchctl on hutch-broker: one call for both."""

    def __init__(self, target, tmp_path: Path) -> None:
        self.target = target
        self.tmp_path = tmp_path

    def __call__(self, *args: str, down: bool = False, wrong_secret: bool = False):
        if self.target.is_hutch:
            return self._hutchctl(args, down=down, wrong_secret=wrong_secret)
        env = None
        if wrong_secret:  # another HOME is another Erlang cookie
            (self.tmp_path / "elsewhere").mkdir(exist_ok=True)
            env = {"HOME": str(self.tmp_path / "elsewhere")}
        node = "hutch-nowhere@localhost" if down else None
        return self.target.broker.rabbitmqctl(
            *args, check=False, env=env, node=node, timeout=CALL_TIMEOUT_S
        )

    def _hutchctl(self, args, *, down: bool, wrong_secret: bool):
        assert HUTCHCTL is not None, "hutchctl is not installed: run make bootstrap"
        broker = self.target.broker
        url = f"http://127.0.0.1:{ports.free_port()}" if down else broker.http_url
        user, password = broker.credentials
        return subprocess.run(
            [
                HUTCHCTL, "--url", url, "--username", user,
                "--password", "wrong" if wrong_secret else password, *args,
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=CALL_TIMEOUT_S,
            check=False,
        )  # fmt: skip

    def ok(self, *args: str) -> str:
        result = self(*args)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result.stdout


@pytest.fixture
def names(target) -> Iterator[dict[str, str]]:
    made = {"vhost": target.name("vh"), "user": target.name("user"), "global": target.name("g")}
    yield made
    target.api.delete(f"/vhosts/{quote(made['vhost'])}")
    target.api.delete(f"/users/{quote(made['user'])}")
    target.api.delete(f"/global-parameters/{quote(made['global'])}")


@pytest.fixture
def ctl(target, tmp_path) -> Ctl:
    return Ctl(target, tmp_path)


def configure(ctl: Ctl, vhost: str, user: str, global_name: str) -> None:
    """The sequence under test, each command expected to succeed on both.

    Once the vhost and the user exist, the commands on one object (the user, a permission,
    the policies, the operator policies, the vhost's limits, the global parameters) keep their
    order, and those chains run side by side (``AT_ONCE`` at a time): a chain touches nothing
    another one reads, and each rabbitmqctl call is a VM's start of its own.
    """
    ctl.ok("add_vhost", vhost)
    ctl.ok("add_vhost", vhost)  # again: rabbitmqctl accepts it
    ctl.ok("add_user", user, "pw1")
    chains: list[list[tuple[str, ...]]] = [
        [
            ("set_user_tags", user, "monitoring", "policymaker"),
            ("change_password", user, "pw2"),
            ("set_user_limits", user, '{"max-channels":3}'),
            ("set_user_limits", user, '{"max-connections":2}'),  # merges into the user's limits
        ],
        [
            ("set_permissions", "-p", vhost, user, "^q", ".*", ".*"),
            ("set_topic_permissions", "-p", vhost, user, "amq.topic", "^a", "^b"),
        ],
        [
            ("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"),
            ("clear_permissions", "-p", vhost, "guest"),
            ("clear_permissions", "-p", vhost, "guest"),  # again: nothing to clear is fine
        ],
        [
            ("set_policy", "-p", vhost, "cap", r"^q\.",
             '{"max-length":5,"overflow":"reject-publish"}', "--priority", "3", "--apply-to",
             "queues"),
            ("set_policy", "-p", vhost, "ae", "^e", '{"alternate-exchange":"x"}'),
            ("set_policy", "-p", vhost, "ae", "^e", '{"alternate-exchange":"ae"}', "--apply-to",
             "exchanges", "--priority", "1"),
            ("set_policy", "-p", vhost, "gone", "^g", '{"message-ttl":1}'),
            ("clear_policy", "-p", vhost, "gone"),
        ],
        [
            ("set_operator_policy", "-p", vhost, "op", "^q", '{"max-length":2}', "--apply-to",
             "queues"),
            ("set_operator_policy", "-p", vhost, "op-gone", "^q", '{"max-length":9}'),
            ("clear_operator_policy", "-p", vhost, "op-gone"),
        ],
        [
            ("set_vhost_limits", "-p", vhost, '{"max-connections":10,"max-queues":5}'),
            ("set_vhost_limits", "-p", vhost, '{"max-queues":7}'),  # replaces the object
            ("set_parameter", "-p", vhost, "vhost-limits", "limits", '{"max-queues":7}'),
        ],
        [
            ("set_global_parameter", global_name, '{"a":[1,2]}'),
            ("set_global_parameter", global_name + "-gone", '"x"'),
            ("clear_global_parameter", global_name + "-gone"),
        ],
    ]  # fmt: skip

    def run(chain: list[tuple[str, ...]]) -> None:
        for args in chain:
            ctl.ok(*args)

    side_by_side([lambda chain=chain: run(chain) for chain in chains])  # re-raises a failure


def side_by_side(calls: list[Callable[[], T]]) -> list[T]:
    """Each call's result, in order, ``AT_ONCE`` running at a time. On a failure or the test's
    timeout the calls not yet started are dropped and the running ones awaited: a CLI started
    after the test, against a node already stopped, crashed and left an erl_crash.dump."""
    pool = ThreadPoolExecutor(max_workers=AT_ONCE)
    try:
        return list(pool.map(lambda call: call(), calls))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def read_back(api: Management, vhost: str, user: str, global_name: str) -> dict:
    vh, u = quote(vhost), quote(user)

    def by_name(items):
        return sorted(items, key=lambda item: item["name"])

    parameters = [
        {key: item[key] for key in ("component", "name", "value")}
        for item in api.get("/parameters").body
        if item["vhost"] == vhost
    ]
    user_item = api.get(f"/users/{u}").body
    return {
        "policies": by_name(api.get(f"/policies/{vh}").body),
        "operator-policies": by_name(api.get(f"/operator-policies/{vh}").body),
        "parameters": sorted(parameters, key=lambda item: (item["component"], item["name"])),
        "global": api.get(f"/global-parameters/{quote(global_name)}").body,
        "global-gone": api.get(f"/global-parameters/{quote(global_name)}-gone").status,
        "user": {"name": user_item["name"], "tags": sorted(user_item["tags"])},
        "user-limits": api.get(f"/user-limits/{u}").body,
        "vhost-limits": api.get(f"/vhost-limits/{vh}").body,
        "permissions": api.get(f"/permissions/{vh}/{u}").body,
        "guest-permissions": api.get(f"/permissions/{vh}/guest").status,
        "topic-permissions": api.get(f"/topic-permissions/{vh}/{u}").body,
    }


class As:
    """Management as another user (the new password must work)."""

    def __init__(self, broker, user: str, password: str) -> None:
        self.http_url = broker.http_url
        self.credentials = (user, password)


def test_the_same_commands_configure_both_brokers_alike_and_list_the_same_text(target, ctl, names):
    """One configuration, read back over the API and then listed: each rabbitmqctl call starts
    an Erlang VM (about 0.6-0.8 s of CPU, 1-2 s of wall time on the shared machine), so the
    26 calls of ``configure`` are made once, not once for the read-back and again for the
    listings."""
    vhost, user, global_name = names["vhost"], names["user"], names["global"]
    configure(ctl, vhost, user, global_name)

    policy = {"vhost": vhost, "priority": 0}
    assert read_back(target.api, vhost, user, global_name) == {
        "policies": [
            {**policy, "name": "ae", "pattern": "^e", "apply-to": "exchanges",
             "definition": {"alternate-exchange": "ae"}, "priority": 1},
            {**policy, "name": "cap", "pattern": r"^q\.", "apply-to": "queues",
             "definition": {"max-length": 5, "overflow": "reject-publish"}, "priority": 3},
        ],
        "operator-policies": [
            {**policy, "name": "op", "pattern": "^q", "apply-to": "queues",
             "definition": {"max-length": 2}},
        ],
        "parameters": [
            {"component": "operator_policy", "name": "op",
             "value": {"pattern": "^q", "definition": {"max-length": 2}, "priority": 0,
                       "apply-to": "queues"}},
            {"component": "vhost-limits", "name": "limits", "value": {"max-queues": 7}},
        ],
        "global": {"name": global_name, "value": {"a": [1, 2]}},
        "global-gone": 404,
        "user": {"name": user, "tags": ["monitoring", "policymaker"]},
        "user-limits": [{"user": user, "value": {"max-channels": 3, "max-connections": 2}}],
        "vhost-limits": [{"vhost": vhost, "value": {"max-queues": 7}}],
        "permissions": {"user": user, "vhost": vhost, "configure": "^q", "write": ".*",
                        "read": ".*"},
        "guest-permissions": 404,
        "topic-permissions": [
            {"user": user, "vhost": vhost, "exchange": "amq.topic", "write": "^a", "read": "^b"},
        ],
    }  # fmt: skip
    as_user = Management(As(target.broker, user, "pw2"))
    assert as_user.get("/whoami").body["name"] == user
    assert Management(As(target.broker, user, "pw1")).get("/whoami").status == 401

    # the listings, on the configuration just read back
    ctl.ok("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
    channel = target.connect(vhost=vhost).channel()
    channel.confirm_delivery()
    channel.queue_declare("q.one", durable=True)
    for body in (b"1", b"2"):
        channel.basic_publish("", "q.one", body)

    def lines(*args):
        return sorted(ctl.ok(*args).splitlines())

    assert lines("-q", "list_policies", "-p", vhost) == sorted(
        [
            "vhost\tname\tpattern\tapply-to\tdefinition\tpriority",
            f'{vhost}\tae\t^e\texchanges\t{{"alternate-exchange":"ae"}}\t1',
            f'{vhost}\tcap\t^q\\.\tqueues\t{{"max-length":5,"overflow":"reject-publish"}}\t3',
        ]
    )
    assert lines("-s", "list_operator_policies", "-p", vhost) == [
        f'{vhost}\top\t^q\tqueues\t{{"max-length":2}}\t0'
    ]
    assert ctl.ok("list_policies", "-p", vhost).splitlines()[0] == (
        f'Listing policies for vhost "{vhost}" ...'
    )
    assert [line for line in lines("-s", "list_users") if line.startswith(user)] == [
        f"{user}\t[monitoring, policymaker]"
    ]
    assert lines("-q", "list_permissions", "-p", vhost) == sorted(
        ["user\tconfigure\twrite\tread", f"{user}\t^q\t.*\t.*", "guest\t.*\t.*\t.*"]
    )
    assert lines("-q", "list_topic_permissions", "-p", vhost) == sorted(
        ["user\texchange\twrite\tread", f"{user}\tamq.topic\t^a\t^b"]
    )
    assert ctl.ok("-q", "list_vhost_limits", "-p", vhost) == '{"max-queues":7}\n'
    assert ctl.ok("-q", "list_queues", "-p", vhost, "name", "messages", "durable") == (
        "name\tmessages\tdurable\nq.one\t2\ttrue\n"
    )
    assert ctl.ok("-q", "list_bindings", "-p", vhost) == (
        "source_name\tsource_kind\tdestination_name\tdestination_kind\trouting_key\targuments\n"
        "\texchange\tq.one\tqueue\tq.one\t[]\n"
    )
    parameters = json.loads(ctl.ok("list_parameters", "-p", vhost, "--formatter", "json"))
    assert sorted(
        (
            item["component"],
            item["name"],
            json.loads(item["value"])[
                "max-queues" if item["component"] == "vhost-limits" else "priority"
            ],
        )
        for item in parameters
    ) == [("operator_policy", "op", 0), ("vhost-limits", "limits", 7)]
    purged = ctl("purge_queue", "-p", vhost, "q.one")
    assert purged.returncode == 0
    assert ctl.ok("-s", "list_queues", "-p", vhost, "name", "messages") == "q.one\t0\n"
    deleted = ctl.ok("delete_queue", "-p", vhost, "q.one")
    assert deleted.splitlines()[-1] == "Queue was successfully deleted with 0 ready messages"


def test_the_same_mistakes_give_the_same_exit_codes(target, ctl, names, tmp_path):
    vhost, user = names["vhost"], names["user"]
    ctl.ok("add_vhost", vhost)
    ctl.ok("add_user", user, "pw")
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{bad")
    nope, nobody = "nope-" + vhost, "nobody-" + user
    mistakes = {
        "unknown vhost (set_policy)": ["set_policy", "-p", nope, "x", "^a", '{"max-length":1}'],
        "unknown vhost (list_policies)": ["list_policies", "-p", nope],
        "unknown vhost (list_operator_policies)": ["list_operator_policies", "-p", nope],
        "unknown vhost (list_permissions)": ["list_permissions", "-p", nope],
        "unknown vhost (set_vhost_limits)": ["set_vhost_limits", "-p", nope, '{"max-queues":1}'],
        "unknown vhost (set_permissions)": ["set_permissions", "-p", nope, user, "a", "b", "c"],
        "unknown vhost (delete_vhost)": ["delete_vhost", nope],
        "unknown vhost lists no queues": ["list_queues", "-p", nope],
        "unknown user (set_permissions)": ["set_permissions", "-p", vhost, nobody, "a", "b", "c"],
        "unknown user (change_password)": ["change_password", nobody, "x"],
        "unknown user (delete_user)": ["delete_user", nobody],
        "unknown user (set_user_tags)": ["set_user_tags", nobody, "x"],
        "unknown user (set_topic_permissions)": [
            "set_topic_permissions",
            nobody,
            "amq.topic",
            "a",
            "b",
        ],
        "existing user": ["add_user", user, "pw"],
        "no password": ["add_user", user + "-x"],
        "missing policy": ["clear_policy", "-p", vhost, "nope"],
        "missing operator policy": ["clear_operator_policy", "-p", vhost, "nope"],
        "missing parameter": ["clear_parameter", "-p", vhost, "vhost-limits", "nope"],
        "missing global parameter": ["clear_global_parameter", "nope-" + vhost],
        "bad JSON definition": ["set_policy", "-p", vhost, "x", "^a", "notjson"],
        "bad JSON value": ["set_global_parameter", "g-" + vhost, "bad"],
        "unknown policy key": ["set_policy", "-p", vhost, "x", "^a", '{"max-lengthx":1}'],
        "unknown apply-to": ["set_policy", "-p", vhost, "x", "^a", "{}", "--apply-to", "foo"],
        "unknown limit": ["set_vhost_limits", "-p", vhost, '{"foo":1}'],
        "unknown component": ["set_parameter", "-p", vhost, "nocomp", "x", "{}"],
        "missing queue (purge)": ["purge_queue", "-p", vhost, "nope"],
        "missing queue (delete)": ["delete_queue", "-p", vhost, "nope"],
        "missing arguments": ["set_policy", "x"],
        "too many arguments": ["delete_vhost", "a", "b"],
        "bad priority": ["set_policy", "x", "^a", "{}", "--priority", "abc"],
        "unknown option": ["list_policies", "--bogus"],
        "unknown verb": ["nosuchverb"],
        "unknown column": ["list_queues", "nosuchcol"],
        "definitions not JSON": ["import_definitions", str(bad_json)],
        "definitions missing": ["import_definitions", str(tmp_path / "missing.json")],
    }
    calls = {mistake: lambda args=args: ctl(*args) for mistake, args in mistakes.items()}
    calls["bad credentials"] = lambda: ctl("list_queues", wrong_secret=True)
    calls["broker down"] = lambda: ctl("list_queues", down=True)
    # Each mistake changes nothing (checked below), so none depends on another's order: they run
    # side by side, which takes the wall time of the CLI's start-ups, not their sum.
    results = dict(zip(calls, side_by_side(list(calls.values())), strict=True))
    codes = {mistake: result.returncode for mistake, result in results.items()}
    assert codes == {
        "unknown vhost (set_policy)": 65,
        "unknown vhost (list_policies)": 65,
        "unknown vhost (list_operator_policies)": 65,
        "unknown vhost (list_permissions)": 65,
        "unknown vhost (set_vhost_limits)": 65,
        "unknown vhost (set_permissions)": 69,
        "unknown vhost (delete_vhost)": 65,
        "unknown vhost lists no queues": 0,
        "unknown user (set_permissions)": 67,
        "unknown user (change_password)": 67,
        "unknown user (delete_user)": 67,
        "unknown user (set_user_tags)": 67,
        "unknown user (set_topic_permissions)": 67,
        "existing user": 70,
        "no password": 65,
        "missing policy": 69,
        "missing operator policy": 69,
        "missing parameter": 69,
        "missing global parameter": 69,
        "bad JSON definition": 69,
        "bad JSON value": 69,
        "unknown policy key": 69,
        "unknown apply-to": 69,
        "unknown limit": 69,
        "unknown component": 69,
        "missing queue (purge)": 69,
        "missing queue (delete)": 64,
        "missing arguments": 64,
        "too many arguments": 64,
        "bad priority": 64,
        "unknown option": 64,
        "unknown verb": 64,
        "unknown column": 64,
        "definitions not JSON": 65,
        "definitions missing": 65,
        "bad credentials": 69,
        "broker down": 69,
    }
    # nothing the mistakes tried was made
    assert target.api.get(f"/policies/{quote(vhost)}").body == []
    assert target.api.get(f"/global-parameters/g-{quote(vhost)}").status == 404
    assert target.api.get(f"/users/{quote(user)}-x").status == 404
