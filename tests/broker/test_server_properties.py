"""``server_properties.<name> = <value>``: what connection.start tells clients (issue 30, item 7).

Parsing is checked in memory, bad lines included (each refused with its line, the config left as
it was); then a real hutch-broker started with such a file is asked by pika, and a bad file
refuses the start in one line. tests/sidebyside/test_server_properties.py holds the same
configuration against RabbitMQ 3.10.8.
"""

import pytest
from hutch_broker import __main__ as entry
from hutch_broker import __version__
from hutch_broker import config as config_mod
from hutch_broker.model.broker import Broker
from hutch_broker.protocol import identity
from hutch_demo.management import Management
from hutch_testing.clients import connect


def test_configured_entries_replace_the_brokers_own_and_extra_keys_are_kept():
    config = config_mod.parse(
        "server_properties.product = Acme MQ\n"
        "server_properties.version = 9.9.9 # a comment is not part of it\n"
        "server_properties.cluster_name = pinned\n"
        "server_properties.com.example-team_1 = a=b, c\n"
        "server_properties.product = Acme MQ 2\n"  # a later line wins, as in rabbitmq.conf
    )
    assert config.server_properties == {
        "product": "Acme MQ 2",
        "version": "9.9.9",
        "cluster_name": "pinned",
        "com.example-team_1": "a=b, c",
    }
    properties = identity.server_properties(
        version="1.0", cluster_name="hutch@node", configured=config.server_properties
    )
    assert properties == {
        "product": "Acme MQ 2",
        "version": "9.9.9",
        "platform": identity.PLATFORM,
        "cluster_name": "pinned",
        "copyright": identity.COPYRIGHT,
        "information": identity.INFORMATION,
        "com.example-team_1": "a=b, c",
        "capabilities": dict(identity.CAPABILITIES),
    }


def test_nothing_configured_is_the_brokers_own():
    assert config_mod.BrokerConfig().server_properties == {}
    properties = identity.server_properties(version="1.0", cluster_name="c", configured={})
    assert (properties["product"], properties["version"], properties["cluster_name"]) == (
        "Hutch",
        "1.0",
        "c",
    )


LIMIT = config_mod.SERVER_PROPERTIES_BUDGET


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (
            "server_properties.capabilities = lies",
            "capabilities are not configurable: they say what the broker does, and clients rely "
            "on them",
        ),
        (
            "server_properties.capabilities.basic.nack = false",
            "capabilities are not configurable: they say what the broker does, and clients rely "
            "on them",
        ),
        (
            "server_properties. = x",
            "not a server property name: '' (1-64 letters, digits, '_', '.', '-')",
        ),
        (
            "server_properties.with space = x",
            "not a server property name: 'with space' (1-64 letters, digits, '_', '.', '-')",
        ),
        (
            f"server_properties.{'n' * 65} = x",
            f"not a server property name: '{'n' * 65}' (1-64 letters, digits, '_', '.', '-')",
        ),
        (
            "server_properties.product = tab\there",
            "server property product has unprintable characters: 'tab\\there'",
        ),
        (
            f"server_properties.product = {'x' * (LIMIT - 12)}",
            f"server properties would take {LIMIT + 1} bytes in connection.start; at most "
            f"{LIMIT} may be configured",
        ),
        ("server_properties = x", "unknown key 'server_properties'"),
    ],
)
def test_bad_lines_are_refused_with_their_line_and_change_nothing(line, reason):
    config = config_mod.parse("server_properties.product = Kept\n")
    with pytest.raises(config_mod.ConfigError) as info:
        config_mod.parse(f"heartbeat = 30\n{line}\n", config)
    key = line.partition("=")[0].strip()
    assert str(info.value) == f"line 2 ({key}): {reason}"
    assert config.server_properties == {"product": "Kept"}


def test_the_budget_counts_every_entry_as_encoded():
    # 6 bytes of framing + name + value (UTF-8) each: exactly at the budget is accepted ...
    room = LIMIT - 6 - len("product")
    value = "é" * (room // 2) + "x" * (room % 2)
    at_limit = config_mod.parse(f"server_properties.product = {value}\n")
    assert len(at_limit.server_properties["product"].encode()) == room
    with pytest.raises(config_mod.ConfigError, match=f"would take {LIMIT + 1} bytes"):
        config_mod.parse(f"server_properties.product = {value}x\n")
    # ... and many small entries add up.
    lines = "".join(f"server_properties.k{n:03d} = v\n" for n in range(LIMIT // 11))
    with pytest.raises(config_mod.ConfigError, match=f"at most {LIMIT} may be configured"):
        config_mod.parse(lines + "server_properties.k999 = v\n")


CONFIG = (
    "server_properties.product = Acme MQ\n"
    "server_properties.version = 9.9.9\n"
    "server_properties.platform = Acme/1\n"
    "server_properties.information = see the wiki\n"
    "server_properties.team = messaging\n"
)


def test_a_pika_client_reads_the_configured_properties(hutch_broker_factory, tmp_path):
    config = tmp_path / "identity.conf"
    config.write_text(CONFIG + "cluster_name = acme-east\n")
    broker = hutch_broker_factory(extra_args=["--config", str(config)])

    properties = connect(broker)._impl.server_properties

    assert properties == {
        "product": "Acme MQ",
        "version": "9.9.9",
        "platform": "Acme/1",
        "cluster_name": "acme-east",
        "copyright": identity.COPYRIGHT,
        "information": "see the wiki",
        "team": "messaging",
        "capabilities": dict(identity.CAPABILITIES),
    }


def test_a_renamed_cluster_shows_in_the_next_connection_unless_pinned(
    hutch_broker_factory, tmp_path
):
    plain = hutch_broker_factory()
    pinned_config = tmp_path / "pinned.conf"
    pinned_config.write_text("server_properties.cluster_name = pinned\n")
    pinned = hutch_broker_factory(extra_args=["--config", str(pinned_config)])
    before = connect(plain)._impl.server_properties
    for broker in (plain, pinned):
        assert Management(broker).put("/cluster-name", {"name": "renamed"}).status == 204

    assert before["version"] == __version__
    assert before["cluster_name"] != "renamed"
    assert connect(plain)._impl.server_properties["cluster_name"] == "renamed"
    assert connect(pinned)._impl.server_properties["cluster_name"] == "pinned"


def test_a_bad_server_property_refuses_the_start_in_one_line(tmp_path, capsys):
    config = tmp_path / "broker.conf"
    config.write_text("server_properties.capabilities = {}\n")
    args = ["--amqp-port", "0", "--http-port", "0", "--log-level", "CRITICAL"]
    args += ["--data-dir", str(tmp_path / "data"), "--config", str(config)]
    code = entry.main(args)
    err = capsys.readouterr().err
    assert code == entry.EXIT_CONFIG
    assert err == (
        f"hutch-broker: {config}: line 1 (server_properties.capabilities): capabilities are not "
        "configurable: they say what the broker does, and clients rely on them\n"
    )
    assert not (tmp_path / "data").exists()


def test_a_cluster_name_too_long_for_connection_start_is_refused_and_changes_nothing(
    hutch_broker_factory,
):
    """Every connection.start carries the name, and it must fit the 4,096-byte pre-tune frame:
    a 4,000-byte name accepted by the API would make every later connection fail."""
    broker = hutch_broker_factory()
    api = Management(broker)
    assert api.put("/cluster-name", {"name": "kept"}).status == 204
    too_long = "n" * (identity.MAX_CLUSTER_NAME_BYTES + 1)
    multibyte = "é" * (identity.MAX_CLUSTER_NAME_BYTES // 2 + 1)  # fewer characters, more bytes

    for name in (too_long, "n" * 4000, multibyte):
        refused = api.put("/cluster-name", {"name": name})
        assert refused.status == 400, refused.body
        assert f"longer than {identity.MAX_CLUSTER_NAME_BYTES} bytes" in refused.body["reason"]
        by_parameter = api.put("/global-parameters/cluster_name", {"value": name})
        assert by_parameter.status == 400, by_parameter.body

    assert api.get("/cluster-name").body == {"name": "kept"}
    assert connect(broker)._impl.server_properties["cluster_name"] == "kept"
    fits = "n" * identity.MAX_CLUSTER_NAME_BYTES
    assert api.put("/cluster-name", {"name": fits}).status == 204
    assert connect(broker)._impl.server_properties["cluster_name"] == fits


def test_a_stored_cluster_name_too_long_to_send_falls_back_to_the_configured_one():
    """A definitions file can carry any global parameter; the name is then not sent."""
    broker = Broker(cluster_name="hutch@node")
    broker.set_global_parameter("cluster_name", "x" * (identity.MAX_CLUSTER_NAME_BYTES + 1))
    assert broker.display_cluster_name == "hutch@node"
    broker.set_global_parameter("cluster_name", "short")
    assert broker.display_cluster_name == "short"
