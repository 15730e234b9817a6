"""Issue 16, TLS: what ``spec.tls`` renders into the Broker's children, without a cluster.

The config lines are the ones tests/broker/amqp/test_tls.py runs a real broker with, so these
tables tie the operator's rendering to a broker that is known to serve them.
"""

from __future__ import annotations

import pytest
from hutch_broker import config as broker_config
from hutch_operator.core import references
from hutch_operator.instances.children import configmaps, credentials, meta, services
from hutch_operator.instances.children import statefulsets as sts
from hutch_operator.models import brokers


def broker(**spec: object) -> meta.BrokerObject:
    model = brokers.BrokerSpec.model_validate(spec)
    return meta.BrokerObject("b", "ns", "uid-1", model, image="reg/hutch-broker:0.3.0")


TLS = {"secretName": "b-tls", "caSecretName": "b-ca"}


def test_tls_config_lines_parse_in_the_broker_as_rabbitmq_keys():
    text = configmaps.config_text(broker(tls=TLS))
    assert text.splitlines()[3:] == [
        "# spec.tls",
        "listeners.ssl.default = 5671",
        "management.ssl.port = 15671",
        "ssl_options.certfile = /etc/hutch-tls/tls.crt",
        "ssl_options.keyfile = /etc/hutch-tls/tls.key",
        "management.ssl.certfile = /etc/hutch-tls/tls.crt",
        "management.ssl.keyfile = /etc/hutch-tls/tls.key",
        "ssl_options.cacertfile = /etc/hutch-tls-ca/ca.crt",
        "management.ssl.cacertfile = /etc/hutch-tls-ca/ca.crt",
    ]
    parsed = broker_config.parse(text)
    assert (parsed.amqp_port, parsed.ssl_port, parsed.management_ssl_port) == (5672, 5671, 15671)
    only = broker_config.parse(
        configmaps.config_text(broker(tls={"secretName": "s", "disableNonTLSListeners": True}))
    )
    assert (only.amqp_port, only.http_port, only.tls.cacertfile) == (None, None, "")


def test_tls_mounts_ports_and_probes():
    statefulset = sts.build(broker(tls=TLS), config_hash="c", secret_uid="u")
    template = statefulset["spec"]["template"]
    volumes = {v["name"]: v for v in template["spec"]["volumes"]}
    assert volumes["tls"]["secret"] == {
        "secretName": "b-tls",
        "items": [{"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}],
        "defaultMode": 0o440,
    }
    assert volumes["tls-ca"]["secret"]["secretName"] == "b-ca"
    container = template["spec"]["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert (mounts["tls"], mounts["tls-ca"]) == ("/etc/hutch-tls", "/etc/hutch-tls-ca")
    assert [p["name"] for p in container["ports"]] == [
        "amqp", "management", "amqps", "management-tls",
    ]  # fmt: skip
    assert "--amqp-port" in container["command"]
    client = services.build_client(broker(tls=TLS))
    assert [p["port"] for p in client["spec"]["ports"]] == [5672, 15672, 5671, 15671]


def test_disable_non_tls_listeners_leaves_only_tls_ports_and_probes_them():
    b = broker(tls={"secretName": "b-tls", "disableNonTLSListeners": True})
    container = sts.container(b)
    assert "--amqp-port" not in container["command"]
    assert "--http-port" not in container["command"]
    assert [p["containerPort"] for p in container["ports"]] == [5671, 15671]
    assert container["readinessProbe"]["tcpSocket"]["port"] == "amqps"
    assert container["livenessProbe"]["tcpSocket"]["port"] == "management-tls"
    for service in (services.build_client(b), services.build_headless(b)):
        assert [p["name"] for p in service["spec"]["ports"]] == ["amqps", "management-tls"]
    assert "tls-ca" not in {v["name"] for v in sts.build(b, config_hash="", secret_uid="")[
        "spec"]["template"]["spec"]["volumes"]}  # fmt: skip
    data = credentials.build(b)["stringData"]
    assert data["uri"] == "https://b.ns.svc:15671"
    assert data["amqp-uri"].startswith("amqps://hutch:") and data["amqp-port"] == "5671"


def test_no_tls_renders_nothing_new():
    b = broker()
    assert "ssl" not in configmaps.config_text(b)
    statefulset = sts.build(b, config_hash="c", secret_uid="u")
    assert "hutch.dev/tls-hash" not in statefulset["spec"]["template"]["metadata"]["annotations"]
    assert [p["port"] for p in services.build_client(b)["spec"]["ports"]] == [5672, 15672]


def template_of(b: meta.BrokerObject) -> dict[str, object]:
    """The pod template the operator applies (the config hash as ``apply_children`` computes it)."""
    config_hash = configmaps.data_hash(configmaps.build(b))
    return sts.build(b, config_hash=config_hash, secret_uid="u")["spec"]["template"]


def test_a_renewed_certificate_is_not_in_the_pod_template_but_a_new_secret_name_is():
    """Issue 31: the broker reloads renewed files, so only what names them may roll the pod."""
    template = template_of(broker(tls=TLS))
    assert set(template["metadata"]["annotations"]) == {  # type: ignore[index]
        sts.CONFIG_HASH_ANNOTATION,
        sts.USER_SECRET_UID_ANNOTATION,
    }  # nothing derived from the Secrets' data, which the template is built without
    assert template_of(broker(tls={**TLS, "secretName": "b-tls-2"})) != template
    assert template_of(broker(tls={**TLS, "caSecretName": "b-ca-2"})) != template
    assert template_of(broker()) != template  # TLS off
    assert template_of(broker(tls={**TLS, "disableNonTLSListeners": True})) != template


@pytest.mark.parametrize(
    "line",
    ["ssl_options.certfile = /x", "management.ssl.port = 1", "management.tcp = none",
     "listeners.ssl.default = 1", "ssl_options.cacertfile=/y"],
)  # fmt: skip
def test_tls_keys_are_the_operators(line):
    with pytest.raises(configmaps.ReservedConfigKeyError):
        configmaps.check_additional_config(line)
    configmaps.check_additional_config("ssl_options.verify = verify_peer")  # the user's to add


def test_the_https_listener_is_the_same_broker_for_claims():
    assert references.normalise_endpoint("https://b.ns.svc.cluster.local:15671/") == (
        references.normalise_endpoint("http://b.ns.svc:15672")
    )
    assert references.normalise_endpoint("https://h:8443") == "https://h:8443"


def test_the_default_user_secret_follows_tls_and_keeps_its_password():
    plain = credentials.build(broker(), "s3cret")["stringData"]
    assert credentials.address_update(broker(), plain) == {}
    update = credentials.address_update(broker(tls={"secretName": "t"}), plain)
    assert update == {
        "uri": "https://b.ns.svc:15671",
        "amqp-uri": "amqps://hutch:s3cret@b.ns.svc:5671/%2F",
        "amqp-port": "5671",
        "management-port": "15671",
    }
    # A Secret someone else wrote (no uri): left alone.
    assert credentials.address_update(broker(tls=TLS), {"username": "u", "password": "p"}) == {}
