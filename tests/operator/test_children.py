"""Broker CR → child objects, overrides and conditions, without a cluster.

Contract: docs/contracts/operator.md#children.
"""

from __future__ import annotations

import pytest
from hutch_operator.core import conditions
from hutch_operator.instances import overrides
from hutch_operator.instances.children import configmaps, credentials, disruption, meta, services
from hutch_operator.instances.children import statefulsets as sts
from hutch_operator.models import brokers


def broker(**spec: object) -> meta.BrokerObject:
    model = brokers.BrokerSpec.model_validate(spec)
    return meta.BrokerObject("b", "ns", "uid-1", model, image="reg/hutch-broker:0.3.0")


def test_configmap_has_operator_lines_then_additional_config() -> None:
    cm = configmaps.build(broker(additionalConfig="heartbeat = 30\n"))
    text = cm["data"]["hutch-broker.conf"]
    lines = [line for line in text.splitlines() if not line.startswith("#")]
    assert lines == [
        "vm_memory_high_watermark.absolute = 214748364",
        "disk_free_limit.absolute = 53687091",
        "heartbeat = 30",
    ]
    assert cm["metadata"]["ownerReferences"][0]["uid"] == "uid-1"


@pytest.mark.parametrize(
    "line",
    [
        "vm_memory_high_watermark.relative = 0.9",
        "disk_free_limit.absolute=1",
        "listeners.tcp.default = 1",
    ],
)
def test_reserved_config_keys_are_refused(line: str) -> None:
    with pytest.raises(configmaps.ReservedConfigKeyError, match="operator owns"):
        configmaps.build(broker(additionalConfig=f"# c\n{line}\n"))


def test_config_hash_changes_with_config() -> None:
    one = configmaps.data_hash(configmaps.build(broker()))
    two = configmaps.data_hash(configmaps.build(broker(memoryHighWatermark=0.3)))
    assert one != two and len(one) == 64


def test_statefulset_shape() -> None:
    obj = sts.build(broker(), config_hash="h", secret_uid="s")
    spec = obj["spec"]
    assert (obj["metadata"]["name"], spec["replicas"], spec["serviceName"]) == (
        "b-server",
        1,
        "b-nodes",
    )
    assert spec["selector"]["matchLabels"] == {
        "app.kubernetes.io/name": "hutch-broker",
        "app.kubernetes.io/instance": "b",
    }
    assert spec["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }
    assert spec["volumeClaimTemplates"][0]["spec"]["resources"]["requests"]["storage"] == "1Gi"
    pod = spec["template"]
    assert pod["metadata"]["annotations"] == {
        "hutch.dev/config-hash": "h",
        "hutch.dev/default-user-uid": "s",
    }
    assert pod["metadata"]["labels"]["app.kubernetes.io/version"] == "0.3.0"
    container = pod["spec"]["containers"][0]
    assert container["command"][:3] == ["hutch-broker", "--amqp-port", "5672"]
    assert container["resources"] == {
        "requests": {"cpu": "250m", "memory": "512Mi"},
        "limits": {"memory": "512Mi"},
    }
    startup, readiness = container["startupProbe"], container["readinessProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] == 180  # recovery's budget
    assert startup["periodSeconds"] == 1
    assert readiness["periodSeconds"] * readiness["failureThreshold"] == 10
    assert container["livenessProbe"]["tcpSocket"] == {"port": "management"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] and not security["allowPrivilegeEscalation"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    env = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"]}
    assert env["HUTCH_DEFAULT_PASS"] == {"name": "b-default-user", "key": "password"}


def test_empty_dir_when_size_zero() -> None:
    obj = sts.build(broker(persistence={"size": "0"}), config_hash="h", secret_uid="s")
    assert "volumeClaimTemplates" not in obj["spec"]
    assert {"name": "data", "emptyDir": {}} in obj["spec"]["template"]["spec"]["volumes"]


def test_overrides_merge_by_name_and_delete_with_null() -> None:
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": "hutch-broker", "env": [{"name": "X", "value": "1"}]}],
                    "automountServiceAccountToken": None,
                    "nodeSelector": {"disk": "ssd"},
                }
            }
        }
    }
    obj = sts.build(broker(override={"statefulSet": patch}), config_hash="h", secret_uid="s")
    pod = obj["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"disk": "ssd"}
    assert "automountServiceAccountToken" not in pod
    container = pod["containers"][0]
    assert [e["name"] for e in container["env"]] == [
        "HUTCH_DEFAULT_USER",
        "HUTCH_DEFAULT_PASS",
        "X",
    ]
    assert container["image"] == "reg/hutch-broker:0.3.0"  # merged by name, not replaced


@pytest.mark.parametrize(
    "patch",
    [
        {"spec": {"template": {"spec": {"hostNetwork": True}}}},
        {
            "spec": {
                "template": {
                    "spec": {"containers": [{"name": "c", "securityContext": {"privileged": True}}]}
                }
            }
        },
        {"spec": {"template": {"spec": {"securityContext": {"runAsUser": 0}}}}},
        {"spec": {"template": {"spec": {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}}}},
    ],
)
def test_forbidden_overrides(patch) -> None:
    with pytest.raises(overrides.ForbiddenOverrideError):
        sts.build(broker(override={"statefulSet": patch}), config_hash="h", secret_uid="s")


def test_merge_rules() -> None:
    assert overrides.merge({"a": {"b": 1, "c": 2}}, {"a": {"c": None, "d": 3}}) == {
        "a": {"b": 1, "d": 3}
    }
    assert overrides.merge({"l": [1, 2]}, {"l": [3]}) == {"l": [3]}


def test_services_secret_and_pdb() -> None:
    b = broker(service={"type": "LoadBalancer", "annotations": {"a": "1"}})
    client = services.build_client(b)
    assert client["spec"]["type"] == "LoadBalancer"
    assert [p["port"] for p in client["spec"]["ports"]] == [5672, 15672]
    assert client["metadata"]["annotations"] == {"a": "1"}
    headless = services.build_headless(b)
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"]
    secret = credentials.build(b)
    data = secret["stringData"]
    assert data["uri"] == "http://b.ns.svc:15672" and data["username"] == "hutch"
    assert (
        len(data["password"]) >= 32
        and credentials.build(b)["stringData"]["password"] != data["password"]
    )
    pdb = disruption.build(b)
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def test_conditions_keep_transition_time() -> None:
    first = conditions.upsert(
        None, type_="Ready", status=True, reason="Declared", generation=1, timestamp="t1"
    )
    same = conditions.upsert(
        first, type_="Ready", status=True, reason="Declared", generation=2, timestamp="t2"
    )
    assert same[0]["lastTransitionTime"] == "t1" and same[0]["observedGeneration"] == 2
    flipped = conditions.upsert(
        same, type_="Ready", status=False, reason="BrokerUnavailable", timestamp="t3"
    )
    assert flipped[0]["lastTransitionTime"] == "t3" and flipped[0]["status"] == "False"
    assert conditions.status_patch({"a": 1, "b": 2}, {"a": 1, "b": 3, "c": None}) == {"b": 3}
    assert conditions.status_patch({"c": "x"}, {"c": None}) == {"c": None}
