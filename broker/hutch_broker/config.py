"""Broker configuration: rabbitmq.conf-style ``key = value`` lines plus CLI flags.

The operator renders this file into a ConfigMap, and users may add lines via
``Broker.spec.additionalConfig``, so the format is the one RabbitMQ users
already write.  Parsing is pure and strict: an unknown key or a bad value is
an error that names the line, so a typo never silently falls back to a
default.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

_UNITS: Final = {
    "": 1,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "k": 1024,
    "m": 1024**2,
    "g": 1024**3,
}

MAX_MESSAGE_SIZE_CAP: Final = 512 * 1024 * 1024

# ``server_properties.<name> = <value>``: RabbitMQ's ``rabbit.server_properties`` (advanced.config
# only; rabbitmq.conf has no key for it). The configured entries together, as encoded in
# connection.start (name, value and 6 bytes of framing each), stay within this budget, so the
# frame keeps well inside the 4,096 bytes (AMQP's frame-min-size) every client accepts before
# tune; the broker's own entries and capabilities take about 450.
SERVER_PROPERTIES_BUDGET: Final = 2048
_SERVER_PROPERTY_NAME: Final = re.compile(r"[A-Za-z0-9_.-]{1,64}")


class ConfigError(ValueError):
    """A config line that cannot be applied."""


@dataclass(slots=True)
class TLSOptions:
    """``ssl_options.*`` (AMQPS) or ``management.ssl.*`` (HTTPS), as RabbitMQ names them.

    Each listener names its own files, as in RabbitMQ (management.ssl.* has no fallback).
    """

    certfile: str = ""
    keyfile: str = ""
    cacertfile: str = ""
    verify_peer: bool = False  # verify = verify_peer | verify_none
    fail_if_no_peer_cert: bool = False


@dataclass(slots=True)
class BrokerConfig:
    amqp_port: int | None = 5672
    http_port: int | None = 15672
    bind: str = "127.0.0.1"
    data_dir: Path = field(default_factory=lambda: Path("hutch-data"))
    cluster_name: str = ""
    default_user: str = "guest"
    default_pass: str = "guest"  # noqa: S105 - RabbitMQ's documented default, loopback only
    loopback_users: list[str] = field(default_factory=lambda: ["guest"])
    heartbeat: int = 60
    frame_max: int = 131072
    channel_max: int = 2047
    max_message_size: int = 16 * 1024 * 1024
    watermark_relative: float | None = 0.4
    watermark_absolute: int | None = None
    total_memory: int | None = None
    disk_free_limit: int = 50_000_000
    handshake_timeout_s: float = 10.0
    closing_timeout_s: float = 30.0  # connection.close sent, no close-ok: drop the socket
    # Off, as in RabbitMQ: a broker delivers what was published. ``stamp_message_id = true``
    # gives every AMQP and HTTP publish without a message_id one (``hutch-<boot>-<n>``).
    stamp_message_id: bool = False
    # Over the broker's own server_properties (protocol/identity.py); never capabilities.
    server_properties: dict[str, str] = field(default_factory=dict)
    # management.restrictions.operator_policy_changes.disabled (RabbitMQ 3.11+): operator
    # policies are read-only through the HTTP API; definitions files still set them.
    operator_policy_changes_disabled: bool = False
    # TLS (server/tls.py builds the contexts and refuses bad files at start-up). ``None`` ports
    # mean "no such listener": ``listeners.tcp = none`` and ``management.tcp = none`` leave only
    # the TLS ones.
    ssl_port: int | None = None  # listeners.ssl.default
    management_ssl_port: int | None = None  # management.ssl.port
    tls: TLSOptions = field(default_factory=TLSOptions)
    management_tls: TLSOptions = field(default_factory=TLSOptions)
    # The management listener's bounds (server/httpguard.py). ``None``: a quarter of the file
    # descriptor limit, at most 1,000. The request timeout runs from a connection's start or
    # its last response until the next request's headers are complete (idle keep-alive too).
    http_max_connections: int | None = None  # management.tcp.max_connections
    http_request_timeout_s: float = 30.0  # management.tcp.request_timeout, in ms there
    # ``--vhost-workers N``: a listener process and N broker processes, each owning the vhosts
    # server/listener.py assigns it (server/workers.py). 0: one process, as always.
    vhost_workers: int = 0
    # ``--vhost-worker-timeout S``: a worker that leaves the listener's liveness question
    # unanswered this long is killed and restarted (server/liveness.py says why 10 s).
    vhost_worker_timeout_s: float = 10.0


def parse_size(text: str) -> int:
    """``1073741824``, ``512MiB``, ``2GB`` -> bytes."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", text)
    if match is None or match.group(2).lower() not in _UNITS:
        raise ConfigError(f"not a size: {text!r}")
    return int(match.group(1)) * _UNITS[match.group(2).lower()]


def _message_size(text: str) -> int:
    """RabbitMQ refuses a ``max_message_size`` above 512 MiB (its hard cap); so does Hutch."""
    size = parse_size(text)
    if not 1 <= size <= MAX_MESSAGE_SIZE_CAP:
        raise ConfigError(f"must be between 1 and {MAX_MESSAGE_SIZE_CAP} (512 MiB): {text!r}")
    return size


def _bool(text: str) -> bool:
    if text.lower() in ("true", "yes", "1"):
        return True
    if text.lower() in ("false", "no", "0"):
        return False
    raise ConfigError(f"not a boolean: {text!r}")


def _ratio(text: str) -> float:
    value = float(text)
    if not 0 <= value <= 1:
        raise ConfigError(f"must be between 0 and 1: {text!r}")
    return value


def _port_of(value: str) -> int:
    return int(value.rsplit(":", 1)[-1])


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ConfigError(f"must be at least 1: {text!r}")
    return value


def _milliseconds(text: str) -> float:
    return _positive(text) / 1000


def _verify(text: str) -> bool:
    if text not in ("verify_peer", "verify_none"):
        raise ConfigError(f"must be verify_peer or verify_none: {text!r}")
    return text == "verify_peer"


def _none_only(key: str, value: str) -> None:
    if value.strip() != "none":
        raise ConfigError(f"{key} only accepts 'none' (set a port with {key}.default or .port)")


def _encoded_size(properties: dict[str, str]) -> int:
    """Bytes in connection.start's table: a short name, a type octet, a long string."""
    return sum(6 + len(name) + len(value.encode()) for name, value in properties.items())


def _server_property(config: BrokerConfig, name: str, value: str) -> None:
    """``server_properties.<name> = <value>``: a string property of connection.start.

    Refused: ``capabilities`` (they say what the broker does; RabbitMQ drops a configured one),
    names that are not 1-64 letters, digits, ``_``, ``.`` or ``-``, unprintable values, and
    entries past the budget.
    """
    if name == "capabilities" or name.startswith("capabilities."):
        raise ConfigError(
            "capabilities are not configurable: they say what the broker does, and clients rely "
            "on them"
        )
    if _SERVER_PROPERTY_NAME.fullmatch(name) is None:
        raise ConfigError(
            f"not a server property name: {name!r} (1-64 letters, digits, '_', '.', '-')"
        )
    if not value.isprintable():
        raise ConfigError(f"server property {name} has unprintable characters: {value!r}")
    wanted = {**config.server_properties, name: value}
    size = _encoded_size(wanted)
    if size > SERVER_PROPERTIES_BUDGET:
        raise ConfigError(
            f"server properties would take {size} bytes in connection.start; "
            f"at most {SERVER_PROPERTIES_BUDGET} may be configured"
        )
    config.server_properties = wanted


# ssl_options.<option> / management.ssl.<option> -> (TLSOptions attribute, converter)
_TLS_OPTIONS: Final[dict[str, tuple[str, Callable[[str], object]]]] = {
    "certfile": ("certfile", str),
    "keyfile": ("keyfile", str),
    "cacertfile": ("cacertfile", str),
    "verify": ("verify_peer", _verify),
    "fail_if_no_peer_cert": ("fail_if_no_peer_cert", _bool),
}


def _apply_tls(config: BrokerConfig, key: str, value: str) -> bool:
    """The TLS keys; False when ``key`` is not one of them."""
    prefix, _, option = key.rpartition(".")
    target = {"ssl_options": config.tls, "management.ssl": config.management_tls}.get(prefix)
    if key == "listeners.ssl.default":
        config.ssl_port = _port_of(value)
    elif key == "management.ssl.port":
        config.management_ssl_port = int(value)
    elif key == "listeners.tcp":
        _none_only(key, value)
        config.amqp_port = None
    elif key == "management.tcp":
        _none_only(key, value)
        config.http_port = None
    elif target is not None and option in _TLS_OPTIONS:
        attribute, convert = _TLS_OPTIONS[option]
        setattr(target, attribute, convert(value))
    else:
        return False
    return True


# key -> (attribute, converter) for the keys that map to one field.
_SIMPLE: Final[dict[str, tuple[str, Callable[[str], object]]]] = {
    "listeners.tcp.default": ("amqp_port", _port_of),
    "management.tcp.port": ("http_port", int),
    "management.tcp.ip": ("bind", str),
    "cluster_name": ("cluster_name", str),
    "default_user": ("default_user", str),
    "default_pass": ("default_pass", str),
    "heartbeat": ("heartbeat", int),
    "frame_max": ("frame_max", int),
    "channel_max": ("channel_max", int),
    "max_message_size": ("max_message_size", _message_size),
    "total_memory_available_override_value": ("total_memory", parse_size),
    "disk_free_limit.absolute": ("disk_free_limit", parse_size),
    "management.tcp.max_connections": ("http_max_connections", _positive),
    "management.tcp.request_timeout": ("http_request_timeout_s", _milliseconds),
}


def _apply(config: BrokerConfig, key: str, value: str) -> None:
    simple = _SIMPLE.get(key)
    if simple is not None:
        attribute, convert = simple
        setattr(config, attribute, convert(value))
    elif key.startswith("loopback_users."):
        user = key.split(".", 1)[1]
        config.loopback_users = [u for u in config.loopback_users if u != user]
        if _bool(value):
            config.loopback_users.append(user)
    elif key == "loopback_users":
        if value.strip() != "none":
            raise ConfigError("loopback_users only accepts 'none'")
        config.loopback_users = []
    elif key == "stamp_message_id":
        config.stamp_message_id = _bool(value)
    elif key.startswith("server_properties."):
        _server_property(config, key.removeprefix("server_properties."), value)
    elif key == "management.restrictions.operator_policy_changes.disabled":
        config.operator_policy_changes_disabled = _bool(value)
    elif key == "vm_memory_high_watermark.relative":
        config.watermark_relative, config.watermark_absolute = _ratio(value), None
    elif key == "vm_memory_high_watermark.absolute":
        config.watermark_absolute, config.watermark_relative = parse_size(value), None
    elif not _apply_tls(config, key, value):
        raise ConfigError(f"unknown key {key!r}")


def parse(text: str, config: BrokerConfig | None = None) -> BrokerConfig:
    config = config or BrokerConfig()
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ConfigError(f"line {number}: expected 'key = value', got {raw.strip()!r}")
        try:
            _apply(config, key.strip(), value.strip())
        except (ConfigError, ValueError) as exc:
            raise ConfigError(f"line {number} ({key.strip()}): {exc}") from exc
    return config


def load(path: Path, config: BrokerConfig | None = None) -> BrokerConfig:
    return parse(path.read_text(encoding="utf-8"), config)
