"""The shared-broker fixtures (``hutch_testing.broker_plugin``) in a module of their own.

A probe module marked ``shared_broker`` runs in a child pytest with only the two broker plugins:
its tests must reach one broker process, each in a vhost of its own that is gone after it, with
"/" refused both over AMQP and through ``api`` and ``amqp_url`` naming the test's vhost; its
``own_broker`` test must get a fresh broker on "/". Any folder's module opts in this way, with
no conftest of its own.
"""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PROBE = """
import pika
import pika.exceptions
import pytest
from hutch_demo.management import quote
from hutch_testing import clients

pytestmark = pytest.mark.shared_broker
SEEN = {}


def test_first(hutch_broker, vhost, channel, api):
    SEEN["process"], SEEN["vhost"] = hutch_broker.process, vhost
    channel.queue_declare("left-behind")
    assert api.queue_exists("left-behind")
    assert vhost.startswith("t-first-")
    by_url = pika.BlockingConnection(pika.URLParameters(hutch_broker.amqp_url))
    assert by_url.channel().queue_declare("left-behind", passive=True), "amqp_url names the vhost"
    by_url.close()


def test_second(hutch_broker, vhost, channel, api):
    assert hutch_broker.process is SEEN["process"], "one broker for the module"
    assert vhost != SEEN["vhost"]
    assert not api.queue_exists("left-behind")
    assert api.get(f"/vhosts/{quote(SEEN['vhost'])}").status == 404, "deleted after its test"


def test_the_default_vhost_is_refused(hutch_broker, api):
    with pytest.raises(pika.exceptions.AMQPConnectionError):
        clients.connect(hutch_broker)  # vhost "/"
    with pytest.raises(AssertionError, match="on a shared broker"):
        api.get("/queues/%2F")


@pytest.mark.own_broker
def test_own(hutch_broker, vhost, channel):
    assert vhost == "/"
    assert hutch_broker is not SEEN["process"]
    channel.queue_declare("mine")
"""


@pytest.mark.broker  # it runs pytest in a child process, which starts brokers
def test_a_shared_broker_module_gets_one_broker_and_a_vhost_per_test(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(textwrap.dedent(PROBE))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "hutch_testing.pytest_plugin",
         "-p", "hutch_testing.broker_plugin", "-p", "no:cacheprovider", "-q", "-rfE",
         "--rootdir", str(tmp_path), str(tmp_path / "test_probe.py")],
        capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False,
    )  # fmt: skip
    assert "4 passed" in run.stdout, run.stdout + run.stderr
