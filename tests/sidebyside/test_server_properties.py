"""Configured ``server_properties`` side by side with RabbitMQ 3.10.8 (issue 30, item 7).

Why: tools branch on what ``connection.start`` says (``product``, ``version``), so an operator
points them at a value. RabbitMQ takes ``rabbit.server_properties`` from advanced.config
(rabbitmq.conf has no key for it); hutch-broker takes ``server_properties.<name> = <value>``
lines in its rabbitmq.conf-style file. Given the same entries, a pika client must read the same
table from both, capabilities included: RabbitMQ drops a configured ``capabilities`` (observed
here), hutch-broker refuses one (tests/broker/test_server_properties.py). A rename through the
management API shows in the next connection on both, unless a configured ``cluster_name`` pins
it (tests/broker/test_server_properties.py checks the pin on hutch-broker).

The configured reference is a second RabbitMQ node of its own (the session's node stays
unconfigured for every other test); it costs one node start, about 6 s.
"""

from collections.abc import Iterator

import pytest
from hutch_testing import rabbitmq as reference
from hutch_testing.clients import connect

pytestmark = pytest.mark.rabbitmq

CONFIGURED = {
    "product": "Acme MQ",
    "version": "9.9.9",
    "platform": "Acme/1",
    "cluster_name": "acme-east",
    "copyright": "Acme Corp.",
    "information": "see the wiki",
    "team": "messaging",
}
ADVANCED_CONFIG = (
    "[{rabbit, [{server_properties, ["
    + ", ".join(f'{{{name}, "{value}"}}' for name, value in CONFIGURED.items())
    + ', {capabilities, "lies"}]}]}].\n'  # dropped by RabbitMQ: its own capabilities are sent
)
HUTCH_CONFIG = "".join(
    f"server_properties.{name} = {value}\n" for name, value in CONFIGURED.items()
)


class ConfiguredRabbitMQ(reference.RabbitMQ):
    """A reference node started with ``ADVANCED_CONFIG``."""

    def _prepare(self) -> None:
        super()._prepare()
        (self.work_dir / "advanced.config").write_text(ADVANCED_CONFIG)


@pytest.fixture(scope="module")
def configured_rabbitmq(rabbitmq) -> Iterator[reference.RabbitMQ]:
    """Depends on the session node, so an unavailable reference skips or fails as there."""
    node = ConfiguredRabbitMQ()
    try:
        node.start()
        yield node
    finally:
        node.stop()


def test_configured_server_properties_are_what_both_brokers_send(
    configured_rabbitmq, hutch_broker_factory, tmp_path
):
    config = tmp_path / "identity.conf"
    config.write_text(HUTCH_CONFIG)
    hutch = hutch_broker_factory(extra_args=["--config", str(config)])

    seen = {
        "rabbitmq": connect(configured_rabbitmq)._impl.server_properties,
        "hutch": connect(hutch)._impl.server_properties,
    }

    assert seen["hutch"] == seen["rabbitmq"]
    assert {name: seen["hutch"][name] for name in CONFIGURED} == CONFIGURED
    assert set(seen["hutch"]["capabilities"]) >= {"publisher_confirms", "basic.nack"}


def test_a_renamed_cluster_shows_in_the_next_connection(target):
    api = target.api
    before = target.connect()._impl.server_properties["cluster_name"]
    renamed = target.name("cluster")
    assert api.put("/cluster-name", {"name": renamed}).status == 204
    try:
        after = target.connect()._impl.server_properties["cluster_name"]
    finally:
        # Put back as it was on the shared reference node: no cluster_name parameter.
        assert api.delete("/global-parameters/cluster_name").status == 204

    assert (before != renamed, after) == (True, renamed)
    assert target.connect()._impl.server_properties["cluster_name"] == before
