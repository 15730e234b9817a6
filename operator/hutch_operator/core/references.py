"""``brokerRef`` / ``connectionSecret`` → (BrokerKey, client), with the checks around them.

Why an index and a short credential cache: 1,000 Queues on one Broker must not mean 1,000 GETs
of the Broker CR and its Secret per pass. Broker facts come from a Kopf index (filled from the
Broker watch Kopf keeps anyway); Secrets are read by GET by name (no Secret watch, so no cache of
every Secret in the cluster) and remembered for 30 s per Secret, dropped at once on a 401.
"""

from __future__ import annotations

import base64
import hashlib
import json
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hutch_operator.core import brokerclient, config, errors, kube
from hutch_operator.models import common

SECRET_TTL = 30.0


@dataclass(frozen=True)
class BrokerFacts:
    """What topology handlers need to know about a Broker CR, kept in a Kopf index."""

    namespace: str
    name: str
    available: bool
    deleting: bool
    allowed_namespaces: tuple[str, ...] = field(default=())
    tls_secret: str = ""  # spec.tls.secretName: the operator talks HTTPS and verifies
    tls_ca_secret: str = ""  # spec.tls.caSecretName
    unavailable_reason: str = ""  # the Available condition's reason while it is not True

    def allows(self, namespace: str) -> bool:
        return namespace == self.namespace or bool({"*", namespace} & set(self.allowed_namespaces))


@dataclass(frozen=True)
class Target:
    """A resolved broker: ``key`` is its normalised management endpoint, ``client`` talks to it."""

    key: str
    client: brokerclient.HttpBrokerClient


BrokerIndex = Mapping[tuple[str, str], Any]

DEFAULT_PORTS = {"http": 80, "https": 443}
# RabbitMQ's management port pair: HTTPS 15671 is the same broker as HTTP 15672.
TLS_MANAGEMENT_PAIR = ("https", 15671, "http", 15672)


def normalise_endpoint(url: str) -> str:
    """One string per broker, however a management URL spells it; the key claims are scoped by.

    Why: claims keyed by the Kubernetes reference (``brokerRef`` vs ``connectionSecret``) let a
    Queue reached both ways through the same broker be declared twice with different limits,
    each sweep truncating the other's messages. Scheme and host are lowercased, the default
    port is filled in, userinfo, query and a trailing ``/`` dropped, and an in-cluster Service
    name loses its cluster domain (``b.ns.svc.cluster.local`` → ``b.ns.svc``, the form a
    ``brokerRef`` resolves to). Names are not resolved: a ClusterIP or another DNS alias of the
    same Service still counts as another broker.
    """
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise errors.ConnectionSecretInvalidError(f"uri {url!r} is not a URL: {exc}") from exc
    scheme = (parts.scheme or "http").lower()
    host = (parts.hostname or "").lower().rstrip(".")
    labels = host.split(".")
    if len(labels) > 3 and labels[2] == "svc":  # <service>.<namespace>.svc.<cluster domain>
        host = ".".join(labels[:3])
    if ":" in host:  # IPv6 literal
        host = f"[{host}]"
    port = port or DEFAULT_PORTS.get(scheme)
    if (scheme, port) == TLS_MANAGEMENT_PAIR[:2]:  # one broker, whichever listener is named
        scheme, port = TLS_MANAGEMENT_PAIR[2:]
    return f"{scheme}://{host}:{port}{parts.path.rstrip('/')}"


def broker_ref_endpoint(spec: common.TopologySpec, namespace: str) -> str | None:
    """The normalised endpoint a ``brokerRef`` resolves to (None for ``connectionSecret``).

    Pure (no Secret read), so the conflict index can key a brokerRef claim before any handler
    ran; it is the URL ``resolve`` gives the client, so both agree.
    """
    if spec.broker_ref is None:
        return None
    ref = spec.broker_ref
    return normalise_endpoint(
        config.broker_address(ref.namespace or namespace, ref.name).management
    )


def broker_ref_name(spec: common.TopologySpec, namespace: str) -> str:
    """``<ns>/<name>`` of the referenced Broker, "" for ``connectionSecret``."""
    if spec.broker_ref is None:
        return ""
    return f"{spec.broker_ref.namespace or namespace}/{spec.broker_ref.name}"


def broker_facts(index: BrokerIndex, namespace: str, name: str) -> BrokerFacts | None:
    store = index.get((namespace, name))
    if not store:
        return None
    facts: BrokerFacts = next(iter(store))
    return facts


async def resolve(
    spec: common.TopologySpec, namespace: str, index: BrokerIndex, *, deleting: bool = False
) -> Target:
    """The broker this object manages, or the error that says why it cannot be reached.

    When ``deleting``, a Broker that is gone or going raises ``BrokerNotFoundError`` before any
    readiness check, so the finalizer can be released at once (namespace deletion).
    """
    if spec.connection_secret is not None:
        name = spec.connection_secret.name
        username, password, uri, ca_pem = await _connection_secret(namespace, name)
        source = f"Secret {namespace}/{name} key ca.crt" if ca_pem else "the system trust store"
        client = brokerclient.POOL.get(uri, username, password, ca_pem=ca_pem, ca_source=source)
        return Target(normalise_endpoint(uri), client)
    if spec.broker_ref is None:
        raise errors.SpecError("exactly one of brokerRef and connectionSecret must be set")
    broker_ns = spec.broker_ref.namespace or namespace
    name = spec.broker_ref.name
    facts = broker_facts(index, broker_ns, name)
    if facts is None or (deleting and facts.deleting):
        raise errors.BrokerNotFoundError(f"Broker {broker_ns}/{name} not found")
    if not facts.allows(namespace):
        raise errors.NamespaceNotAllowedError(
            f"Broker {broker_ns}/{name} does not list namespace {namespace} in "
            "spec.topologyAllowedNamespaces"
        )
    if not facts.available and not deleting:
        why = f" ({facts.unavailable_reason})" if facts.unavailable_reason else " yet"
        raise errors.BrokerNotReadyError(f"Broker {broker_ns}/{name} is not Available{why}")
    username, password = await _default_user(broker_ns, name)
    base_url = config.broker_address(broker_ns, name, tls=bool(facts.tls_secret)).management
    trust = TLSMaterial()
    if facts.tls_secret:
        trust = await tls_material(broker_ns, facts.tls_secret, facts.tls_ca_secret)
    client = brokerclient.POOL.get(
        base_url, username, password, ca_pem=trust.ca_pem, ca_source=trust.ca_source
    )
    # Claims are keyed by the plain address, as broker_ref_endpoint (pure) computes it.
    return Target(normalise_endpoint(config.broker_address(broker_ns, name).management), client)


_SECRETS: dict[tuple[str, str], tuple[float, dict[str, str]]] = {}


def forget_secrets() -> None:
    """After a 401: the password may have changed; read Secrets again."""
    _SECRETS.clear()


async def read_secret(namespace: str, name: str, *, fresh: bool = False) -> dict[str, str] | None:
    cached = _SECRETS.get((namespace, name))
    if cached is not None and cached[0] > time.monotonic() and not fresh:
        return cached[1]
    body = await kube.api().get(kube.object_path("v1", "secrets", namespace, name))
    if body is None:
        _SECRETS.pop((namespace, name), None)
        return None
    data = {k: base64.b64decode(v).decode() for k, v in (body.get("data") or {}).items()}
    _SECRETS[(namespace, name)] = (time.monotonic() + SECRET_TTL, data)
    return data


async def _connection_secret(namespace: str, name: str) -> tuple[str, str, str, str]:
    data = await read_secret(namespace, name)
    if data is None:
        raise errors.ConnectionSecretInvalidError(f"Secret {namespace}/{name} not found")
    missing = [key for key in ("uri", "username", "password") if not data.get(key)]
    if missing:
        raise errors.ConnectionSecretInvalidError(
            f"Secret {namespace}/{name} lacks {', '.join(missing)}"
        )
    return data["username"], data["password"], data["uri"].rstrip("/"), data.get("ca.crt", "")


async def _default_user(namespace: str, broker: str) -> tuple[str, str]:
    data = await read_secret(namespace, f"{broker}-default-user")
    if data is None or not data.get("username") or not data.get("password"):
        raise errors.BrokerNotReadyError(f"Broker {namespace}/{broker} has no default user yet")
    return data["username"], data["password"]


@dataclass(frozen=True)
class TLSMaterial:
    """What a Broker's ``spec.tls`` Secrets hold for the operator: a digest and the CA to trust."""

    digest: str = ""  # sha256 of both Secrets' data: the pod-template annotation that rolls
    ca_pem: str = ""  # "" means the system trust store
    ca_source: str = "the system trust store"


async def tls_material(
    namespace: str, secret_name: str, ca_secret_name: str = "", *, fresh: bool = False
) -> TLSMaterial:
    """Reads ``secretName`` (tls.crt, tls.key, optional ca.crt) and ``caSecretName`` (ca.crt).

    The CA trusted for the management API is ``caSecretName``'s, else ``secretName``'s
    ``ca.crt``, else the system trust store (a publicly issued certificate).
    """
    data = await read_secret(namespace, secret_name, fresh=fresh)
    _require(namespace, secret_name, data, ("tls.crt", "tls.key"))
    assert data is not None  # noqa: S101 - _require raised otherwise
    both = {"tls": data}
    ca_pem, source = data.get("ca.crt", ""), f"Secret {namespace}/{secret_name} key ca.crt"
    if ca_secret_name:
        ca_data = await read_secret(namespace, ca_secret_name, fresh=fresh)
        _require(namespace, ca_secret_name, ca_data, ("ca.crt",))
        assert ca_data is not None  # noqa: S101
        both["ca"] = {"ca.crt": ca_data["ca.crt"]}
        ca_pem, source = ca_data["ca.crt"], f"Secret {namespace}/{ca_secret_name} key ca.crt"
    canonical = json.dumps(both, sort_keys=True, separators=(",", ":"))
    return TLSMaterial(
        digest=hashlib.sha256(canonical.encode()).hexdigest(),
        ca_pem=ca_pem,
        ca_source=source if ca_pem else "the system trust store",
    )


def _require(namespace: str, name: str, data: dict[str, str] | None, keys: tuple[str, ...]) -> None:
    if data is None:
        raise errors.TLSSecretInvalidError(f"Secret {namespace}/{name} (spec.tls) not found")
    missing = [key for key in keys if not data.get(key)]
    if missing:
        raise errors.TLSSecretInvalidError(
            f"Secret {namespace}/{name} (spec.tls) lacks {', '.join(missing)}"
        )
