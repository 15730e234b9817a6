"""A vhost's default queue type, as RabbitMQ 4.x applies it (3.10.8 stores it and ignores it).

Why: the Vhost CRD's ``defaultQueueType: quorum`` is how a platform team makes every queue its
applications declare a quorum queue without touching their code. RabbitMQ 4.x
(``rabbit_amqqueue:augment_declare_args``) gives a declare without ``x-queue-type`` the default
type when the queue's properties suit it and falls back to classic otherwise; a redeclare
without a type matches whatever type the queue already has.

The module shares one broker (``shared_broker``): each test creates a vhost of its own named
after the test's (the 201 of its creation is part of what is checked) and deletes it after. The
default vhost's own check needs "/", which the shared broker refuses, so it has a broker of its
own.
"""

from collections.abc import Iterator

import pika
import pytest
from hutch_demo.management import Management
from hutch_testing import vhosts
from hutch_testing.clients import connect

pytestmark = pytest.mark.shared_broker


@pytest.fixture
def tenant_vhost(vhost: str, api: Management) -> Iterator[str]:
    """The name of the vhost the test creates (unique on the shared broker), deleted after."""
    name = f"{vhost}-quorum-by-default"
    yield name
    api.delete(f"/vhosts/{name}")


@pytest.fixture
def tenant(
    hutch_broker: vhosts.VhostBroker, api: Management, tenant_vhost: str
) -> Iterator[pika.BlockingConnection]:
    assert api.put(f"/vhosts/{tenant_vhost}", {"default_queue_type": "quorum"}).status == 201
    connection = connect(hutch_broker, vhost=tenant_vhost)
    yield connection
    if connection.is_open:
        connection.close()


def kinds(api: Management, vhost: str) -> dict[str, str]:
    return {item["name"]: item["type"] for item in api.get(f"/queues/{vhost}").body}


def test_a_durable_shared_queue_declared_without_a_type_is_quorum(tenant, api, tenant_vhost):
    channel = tenant.channel()
    channel.queue_declare("orders", durable=True)
    channel.queue_declare("orders", durable=True)  # the application's redeclare: equivalent
    channel.queue_declare("explicit", durable=True, arguments={"x-queue-type": "classic"})
    assert kinds(api, tenant_vhost) == {"orders": "quorum", "explicit": "classic"}
    item = api.queue("orders", vhost=tenant_vhost)
    assert item["arguments"] == {"x-queue-type": "quorum"}
    assert api.put(f"/queues/{tenant_vhost}/http-made", {"durable": True}).status == 201
    assert kinds(api, tenant_vhost)["http-made"] == "quorum"


def test_properties_quorum_queues_refuse_fall_back_to_classic(tenant, api, tenant_vhost):
    channel = tenant.channel()
    channel.queue_declare("transient", durable=False)
    channel.queue_declare("mine", durable=True, exclusive=True)
    channel.queue_declare("temporary", durable=True, auto_delete=True)
    generated = channel.queue_declare("", durable=True).method.queue
    assert kinds(api, tenant_vhost) == {
        "transient": "classic", "mine": "classic", "temporary": "classic", generated: "classic",
    }  # fmt: skip


def test_setting_the_default_never_breaks_a_running_applications_redeclare(
    hutch_broker, api, tenant_vhost
):
    """A platform team turns the default on under running applications: their classic queues'
    redeclares (no type named) stay equivalent. RabbitMQ 4.x would inject quorum and refuse
    them unless ``relaxed_checks_on_redeclaration`` is on; Hutch matches the queue's own type
    whenever the vhost has a non-classic default (docs/broker-differences.md)."""
    assert api.put(f"/vhosts/{tenant_vhost}", {}).status == 201  # no default: classic
    connection = connect(hutch_broker, vhost=tenant_vhost)
    channel = connection.channel()
    channel.queue_declare("orders", durable=True)
    assert api.put(f"/vhosts/{tenant_vhost}", {"default_queue_type": "quorum"}).status == 204
    channel.queue_declare("orders", durable=True)  # still equivalent: no type named
    channel.queue_declare("later", durable=True)
    assert kinds(api, tenant_vhost) == {"orders": "classic", "later": "quorum"}
    assert api.put(f"/vhosts/{tenant_vhost}", {"description": "d"}).status == 204  # no type: kept
    channel.queue_declare("newest", durable=True)
    assert kinds(api, tenant_vhost)["newest"] == "quorum"
    with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="inequivalent arg"):
        channel.queue_declare("orders", durable=True, arguments={"x-queue-type": "quorum"})
    connection.close()


def test_back_to_classic_a_typeless_redeclare_of_a_quorum_queue_is_inequivalent(
    tenant, api, tenant_vhost
):
    """As on 3.10.8 and 4.x: with a classic default, no type means classic."""
    channel = tenant.channel()
    channel.queue_declare("orders", durable=True)  # quorum, by the default
    assert api.put(f"/vhosts/{tenant_vhost}", {"default_queue_type": "classic"}).status == 204
    with pytest.raises(pika.exceptions.ChannelClosedByBroker, match="received none"):
        channel.queue_declare("orders", durable=True)


@pytest.mark.own_broker  # the default vhost "/", which the shared broker refuses
def test_the_default_vhost_and_an_unset_default_stay_classic(hutch_broker, api):
    channel = connect(hutch_broker).channel()
    channel.queue_declare("plain", durable=True)
    assert api.queue("plain")["type"] == "classic"
    assert api.queue("plain")["arguments"] == {}
