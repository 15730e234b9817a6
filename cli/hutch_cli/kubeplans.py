"""What ``kubectl hutch`` asks of kubectl, and how it reads the answers, pure.

Why: a kubectl plugin is mostly argument lists and manifests, and those are what is worth
testing without a cluster. Every function here turns a command's options, or an object kubectl
printed as JSON, into a kubectl argument list, a manifest, or lines to print; ``kubectl_hutch``
runs them. The names the operator gives a Broker's children (``<broker>-server``,
``<broker>-default-user``, the ``app.kubernetes.io`` labels, the ``management`` and
``management-tls`` Service ports) are repeated here rather than imported: the plugin is a client
of the cluster like ``kubectl`` itself, and .importlinter keeps hutch_cli off the operator.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping, Sequence
from typing import Any

from hutch_cli.kubeargs import Scope

GROUP = "hutch.dev"
API_VERSION = f"{GROUP}/v1alpha1"
BROKERS = f"brokers.{GROUP}"
PAUSE_ANNOTATION = f"{GROUP}/pause-reconciliation"  # the operator honours it for every kind
MANAGEMENT, MANAGEMENT_TLS = ("management", 15672), ("management-tls", 15671)
AMQP, AMQPS = ("amqp", 5672), ("amqps", 5671)
CONTAINER = "hutch-broker"
PERF_TEST_CA = "/etc/hutch-perf-test"
# Every Hutch kind by the names kubectl accepts for it (singular, plural, short name).
KINDS: dict[str, str] = {}
for _plural, _names in {
    "brokers": ("broker", "hbr"),
    "queues": ("queue", "hq"),
    "exchanges": ("exchange", "hx"),
    "bindings": ("binding", "hbd"),
    "policies": ("policy", "hpol"),
    "operatorpolicies": ("operatorpolicy", "hopol"),
    "users": ("user", "hu"),
    "vhosts": ("vhost", "hvh"),
    "permissions": ("permission", "hperm"),
    "topicpermissions": ("topicpermission", "htp"),
}.items():
    for _name in (_plural, *_names):
        KINDS[_name] = f"{_plural}.{GROUP}"


class PlanError(Exception):
    """Input the plugin refuses before changing anything, or an object it cannot read."""


def selector(name: str) -> str:
    return f"app.kubernetes.io/name=hutch-broker,app.kubernetes.io/instance={name}"


def listing(scope: Scope) -> list[str]:
    every = ["--all-namespaces"] if scope.all_namespaces else []
    return ["get", BROKERS, "--sort-by=.metadata.name", *every]


def children(name: str) -> list[str]:
    """``get NAME``'s second call: everything the operator made for the Broker."""
    kinds = "statefulsets,pods,services,configmaps,secrets,poddisruptionbudgets"
    return ["get", kinds, "-l", selector(name)]


def quantity(value: str, what: str) -> str:
    if not re.fullmatch(r"[0-9]+(\.[0-9]+)?(m|k|Ki|M|Mi|G|Gi|T|Ti|E|Ei|P|Pi)?", value):
        raise PlanError(f"{what} {value!r} is not a Kubernetes quantity (e.g. 512Mi, 2Gi, 500m)")
    return value


def broker_manifest(
    name: str, options: Mapping[str, Any], additional_config: str | None = None
) -> dict[str, Any]:
    """The Broker ``create NAME`` makes; an option left out leaves the CRD's default."""
    spec: dict[str, Any] = {}
    if options.get("replicas") is not None:
        spec["replicas"] = options["replicas"]
    if options.get("image"):
        spec["image"] = options["image"]
    if options.get("image_pull_secret"):
        spec["imagePullSecrets"] = [{"name": s} for s in options["image_pull_secret"]]
    resources = _resources(options)
    if resources:
        spec["resources"] = resources
    if options.get("memory_high_watermark") is not None:
        spec["memoryHighWatermark"] = options["memory_high_watermark"]
    persistence = {}
    if options.get("storage_size"):
        persistence["size"] = quantity(options["storage_size"], "--storage-size")
    if options.get("storage_class"):
        persistence["storageClassName"] = options["storage_class"]
    if persistence:
        spec["persistence"] = persistence
    service = _service(options)
    if service:
        spec["service"] = service
    tls = _tls(options)
    if tls:
        spec["tls"] = tls
    if options.get("allow_namespace"):
        spec["topologyAllowedNamespaces"] = list(options["allow_namespace"])
    if additional_config is not None:
        spec["additionalConfig"] = additional_config
    if options.get("termination_grace_period") is not None:
        spec["terminationGracePeriodSeconds"] = options["termination_grace_period"]
    return {"apiVersion": API_VERSION, "kind": "Broker", "metadata": {"name": name}, "spec": spec}


def _resources(options: Mapping[str, Any]) -> dict[str, Any]:
    """``--memory`` sets request and limit alike (the watermark follows the request)."""
    requests, limits = {}, {}
    memory = options.get("memory")
    if memory:
        requests["memory"] = limits["memory"] = quantity(memory, "--memory")
    for option, into, key in (
        ("memory_request", requests, "memory"),
        ("memory_limit", limits, "memory"),
        ("cpu_request", requests, "cpu"),
        ("cpu_limit", limits, "cpu"),
    ):
        if options.get(option):
            into[key] = quantity(options[option], "--" + option.replace("_", "-"))
    found = {}
    if requests:
        found["requests"] = requests
    if limits:
        found["limits"] = limits
    return found


def _service(options: Mapping[str, Any]) -> dict[str, Any]:
    service: dict[str, Any] = {}
    if options.get("service"):
        service["type"] = options["service"]
    annotations = {}
    for pair in options.get("service_annotation") or ():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise PlanError(f"--service-annotation {pair!r} is not key=value")
        annotations[key] = value
    if annotations:
        service["annotations"] = annotations
    return service


def _tls(options: Mapping[str, Any]) -> dict[str, Any]:
    tls: dict[str, Any] = {}
    if options.get("tls_secret"):
        tls["secretName"] = options["tls_secret"]
    if options.get("tls_ca_secret"):
        tls["caSecretName"] = options["tls_ca_secret"]
    if options.get("disable_non_tls_listeners"):
        tls["disableNonTLSListeners"] = True
    if tls and "secretName" not in tls:
        raise PlanError("--tls-ca-secret and --disable-non-tls-listeners need --tls-secret")
    return tls


def secret_value(secret: Mapping[str, Any], key: str) -> str:
    """One key of a Secret as kubectl prints it (``data`` is base64)."""
    data = secret.get("data") or {}
    if key not in data:
        name = (secret.get("metadata") or {}).get("name", "?")
        raise PlanError(f"Secret {name} has no key {key!r}")
    return base64.b64decode(data[key]).decode("utf-8")


def credentials_lines(secret: Mapping[str, Any]) -> list[str]:
    """What ``secrets`` prints, as ``kubectl rabbitmq secrets`` does."""
    return [f"username: {secret_value(secret, 'username')}",
            f"password: {secret_value(secret, 'password')}"]  # fmt: skip


def default_user_secret(broker: Mapping[str, Any]) -> str:
    status = broker.get("status") or {}
    return str(status.get("defaultUserSecret") or f"{broker['metadata']['name']}-default-user")


def user_secret(user: Mapping[str, Any]) -> str:
    """A User's credentials Secret: the one its status names, else the operator's default."""
    status = user.get("status") or {}
    return str(status.get("credentialsSecret") or f"{user['metadata']['name']}-user-credentials")


def service_ports(service: Mapping[str, Any]) -> dict[str, int]:
    ports = (service.get("spec") or {}).get("ports") or ()
    return {str(p.get("name")): int(p["port"]) for p in ports if p.get("name")}


def management_port(service: Mapping[str, Any], *, prefer_tls: bool) -> tuple[str, int]:
    """(scheme, Service port) of the management listener to forward: HTTPS first for the UI
    when the Broker has TLS (``manage``), plain first for hutchctl (``ctl``), whose requests
    cross kubectl's own TLS tunnel to the Pod and need no certificate naming localhost."""
    ports = service_ports(service)
    order = [("https", MANAGEMENT_TLS), ("http", MANAGEMENT)]
    for scheme, (port_name, _) in order if prefer_tls else order[::-1]:
        if port_name in ports:
            return scheme, ports[port_name]
    name = (service.get("metadata") or {}).get("name", "?")
    raise PlanError(f"Service {name} exposes no management port (management or management-tls)")


def tls_ca_secret(broker: Mapping[str, Any]) -> str | None:
    """The Secret whose ``ca.crt`` verifies the Broker's certificate, as the operator picks it:
    ``spec.tls.caSecretName``, else ``spec.tls.secretName``; None without ``spec.tls``."""
    tls = (broker.get("spec") or {}).get("tls") or {}
    found = tls.get("caSecretName") or tls.get("secretName")
    return str(found) if found else None


def service_host(broker: Mapping[str, Any]) -> str:
    """The name the Broker's certificate is issued for: its client Service's."""
    meta = broker["metadata"]
    return f"{meta['name']}.{meta['namespace']}.svc"


def port_forward(name: str, local: int | None, remote: int) -> list[str]:
    """``local`` 0 lets kubectl choose a free port (printed in its first line)."""
    mapping = f":{remote}" if local == 0 else f"{remote if local is None else local}:{remote}"
    return ["port-forward", f"service/{name}", "--address=127.0.0.1", mapping]


_FORWARDING = re.compile(r"Forwarding from 127\.0\.0\.1:(\d+) -> (\d+)")


def forwarded_port(line: str) -> int | None:
    """The local port in kubectl port-forward's ``Forwarding from 127.0.0.1:P -> R``."""
    found = _FORWARDING.search(line)
    return int(found.group(1)) if found else None


def ui_lines(scheme: str, port: int, username: str, namespace: str, name: str) -> list[str]:
    url = f"{scheme}://localhost:{port}/"
    lines = [f"Management UI of Broker {namespace}/{name}: {url}",
             f"  log in as {username}: kubectl hutch secrets -n {namespace} {name}"]  # fmt: skip
    if scheme == "https":
        lines.append(f"  its certificate names {name}.{namespace}.svc, not localhost")
    lines.append("  Ctrl-C ends the port-forward")
    return lines


def tail(name: str, *, follow: bool, lines: int) -> list[str]:
    command = ["logs", "-l", selector(name), "-c", CONTAINER, "--prefix", f"--tail={lines}"]
    return [*command, "--follow"] if follow else command


def resource_ref(ref: str) -> tuple[str, str]:
    """``NAME`` (a Broker) or ``KIND/NAME`` -> (kubectl resource, name)."""
    kind, sep, name = ref.rpartition("/")
    if not sep:
        return BROKERS, ref
    resource = KINDS.get(kind.lower().removesuffix(f".{GROUP}"))
    if resource is None or not name:
        kinds = ", ".join(sorted({k for k in KINDS if not k.endswith("s")}))
        raise PlanError(f"{ref!r}: not NAME or KIND/NAME with KIND one of {kinds}")
    return resource, name


def pause(refs: Sequence[str], *, paused: bool) -> list[list[str]]:
    """One ``kubectl annotate`` per object (all refs checked first: nothing changes on a typo)."""
    resolved = [resource_ref(ref) for ref in refs]
    change = f"{PAUSE_ANNOTATION}=true" if paused else f"{PAUSE_ANNOTATION}-"
    return [["annotate", "--overwrite", resource, name, change] for resource, name in resolved]


def paused_lines(listed: Mapping[str, Any]) -> list[str]:
    """``list-paused``: the Hutch objects carrying the annotation (annotations cannot be
    selected server-side, so kubectl lists every Hutch kind and this filters)."""
    rows = [("NAMESPACE", "KIND", "NAME")]
    for item in listed.get("items") or ():
        meta = item.get("metadata") or {}
        if (meta.get("annotations") or {}).get(PAUSE_ANNOTATION) == "true":
            rows.append((str(meta.get("namespace", "")), str(item.get("kind")), str(meta["name"])))
    if len(rows) == 1:
        return ["No paused Hutch objects."]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return ["   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
            for row in rows]  # fmt: skip


def hutch_kinds() -> str:
    return ",".join(sorted(set(KINDS.values())))
