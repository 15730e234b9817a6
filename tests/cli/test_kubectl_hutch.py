"""kubectl hutch's pure parts: argv -> command, command -> kubectl arguments and manifests,
kubectl's JSON -> what is printed. No cluster here; the node test
(tests/operator/test_kubectl_hutch_node.py) runs every verb against a real one.
"""

import base64

import pytest
from hutch_cli import kubeargs, kubejobs, kubeplans


def test_scope_flags_go_before_or_after_the_verb_and_reach_kubectl() -> None:
    before = kubeargs.parse(["-n", "team-a", "--context", "lab", "list"])
    after = kubeargs.parse(["list", "-n", "team-a", "--context=lab"])
    assert before.scope == after.scope
    assert before.scope.flags() == ["--context=lab", "--namespace=team-a"]
    assert kubeargs.parse(["list", "-A"]).scope.all_namespaces


def test_ctl_hands_every_word_after_the_name_to_hutchctl() -> None:
    """Even words that look like the plugin's own flags (-n is not hutchctl's, -p is)."""
    for argv in (
        ["ctl", "-n", "team-a", "hutch", "--", "list_queues", "-p", "/", "name"],
        ["-n", "team-a", "ctl", "hutch", "list_queues", "-p", "/", "name"],
    ):
        command = kubeargs.parse(argv)
        assert (command.verb, command.name, command.scope.namespace) == ("ctl", "hutch", "team-a")
        assert command.rest == ("list_queues", "-p", "/", "name")
    weird = kubeargs.parse(["ctl", "hutch", "set_policy", "--apply-to", "queues", "-n", "x"])
    assert weird.rest == ("set_policy", "--apply-to", "queues", "-n", "x")
    assert weird.scope.namespace is None


def test_perf_test_keeps_its_own_flag_before_the_name() -> None:
    command = kubeargs.parse(["perf-test", "--no-wait", "hutch", "-x", "2", "-z", "5"])
    assert command.options["no_wait"] is True
    assert command.rest == ("-x", "2", "-z", "5")


@pytest.mark.parametrize(
    "argv",
    [["ctl", "hutch"], ["create"], ["get"], ["frobnicate", "x"], ["create", "b", "--replicas", "x"],
     ["create", "b", "--service", "Ingress"], ["list", "--bogus"]],
)  # fmt: skip
def test_bad_command_lines_are_refused(argv: list[str]) -> None:
    with pytest.raises(kubeargs.UsageError):
        kubeargs.parse(argv)


def test_create_builds_a_broker_with_only_the_options_given() -> None:
    command = kubeargs.parse(["create", "hutch"])
    assert kubeplans.broker_manifest(command.name, command.options) == {
        "apiVersion": "hutch.dev/v1alpha1",
        "kind": "Broker",
        "metadata": {"name": "hutch"},
        "spec": {},
    }


def test_create_maps_every_option_to_the_crd_field() -> None:
    command = kubeargs.parse([
        "create", "hutch", "--replicas", "1", "--memory", "1Gi", "--cpu-request", "500m",
        "--storage-size", "5Gi", "--storage-class", "fast", "--service", "NodePort",
        "--service-annotation", "a=b", "--tls-secret", "tls", "--tls-ca-secret", "ca",
        "--disable-non-tls-listeners", "--allow-namespace", "team-b", "--image", "img:1",
        "--image-pull-secret", "pull", "--memory-high-watermark", "0.5",
        "--termination-grace-period", "30",
    ])  # fmt: skip
    spec = kubeplans.broker_manifest(command.name, command.options, "log.level = debug\n")["spec"]
    assert spec == {
        "replicas": 1,
        "image": "img:1",
        "imagePullSecrets": [{"name": "pull"}],
        "resources": {"requests": {"memory": "1Gi", "cpu": "500m"}, "limits": {"memory": "1Gi"}},
        "memoryHighWatermark": 0.5,
        "persistence": {"size": "5Gi", "storageClassName": "fast"},
        "service": {"type": "NodePort", "annotations": {"a": "b"}},
        "tls": {"secretName": "tls", "caSecretName": "ca", "disableNonTLSListeners": True},
        "topologyAllowedNamespaces": ["team-b"],
        "additionalConfig": "log.level = debug\n",
        "terminationGracePeriodSeconds": 30,
    }


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--memory", "lots"], "--memory 'lots' is not a Kubernetes quantity"),
        (["--tls-ca-secret", "ca"], "need --tls-secret"),
        (["--service-annotation", "novalue"], "is not key=value"),
    ],
)
def test_create_refuses_bad_values_before_calling_kubectl(argv: list[str], said: str) -> None:
    command = kubeargs.parse(["create", "hutch", *argv])
    with pytest.raises(kubeplans.PlanError, match=said):
        kubeplans.broker_manifest(command.name, command.options)


def secret(**values: str) -> dict:
    data = {key: base64.b64encode(value.encode()).decode() for key, value in values.items()}
    return {"metadata": {"name": "s"}, "data": data}


def test_secrets_prints_what_kubectl_rabbitmq_prints() -> None:
    lines = kubeplans.credentials_lines(secret(username="hutch", password="p@ss:wörd"))
    assert lines == ["username: hutch", "password: p@ss:wörd"]
    with pytest.raises(kubeplans.PlanError, match="has no key 'password'"):
        kubeplans.credentials_lines(secret(username="hutch"))


def test_the_secrets_of_a_broker_and_of_a_user() -> None:
    assert kubeplans.default_user_secret({"metadata": {"name": "b"}}) == "b-default-user"
    named = {"metadata": {"name": "b"}, "status": {"defaultUserSecret": "other"}}
    assert kubeplans.default_user_secret(named) == "other"
    assert kubeplans.user_secret({"metadata": {"name": "app"}}) == "app-user-credentials"
    imported = {"metadata": {"name": "app"}, "status": {"credentialsSecret": "mine"}}
    assert kubeplans.user_secret(imported) == "mine"


def service(*names: str) -> dict:
    numbers = {"amqp": 5672, "management": 15672, "amqps": 5671, "management-tls": 15671}
    return {"metadata": {"name": "b"},
            "spec": {"ports": [{"name": n, "port": numbers[n]} for n in names]}}  # fmt: skip


def test_manage_prefers_https_and_ctl_prefers_the_plain_port() -> None:
    both = service("amqp", "management", "amqps", "management-tls")
    assert kubeplans.management_port(both, prefer_tls=True) == ("https", 15671)
    assert kubeplans.management_port(both, prefer_tls=False) == ("http", 15672)
    tls_only = service("amqps", "management-tls")
    assert kubeplans.management_port(tls_only, prefer_tls=False) == ("https", 15671)
    assert kubeplans.management_port(service("amqp", "management"), prefer_tls=True) == (
        "http", 15672,
    )  # fmt: skip
    with pytest.raises(kubeplans.PlanError, match="no management port"):
        kubeplans.management_port(service("amqp"), prefer_tls=True)


def test_port_forward_arguments_and_the_port_kubectl_chose() -> None:
    assert kubeplans.port_forward("b", None, 15672) == [
        "port-forward", "service/b", "--address=127.0.0.1", "15672:15672"
    ]  # fmt: skip
    assert kubeplans.port_forward("b", 0, 15671)[-1] == ":15671"
    assert kubeplans.port_forward("b", 8080, 15672)[-1] == "8080:15672"
    assert kubeplans.forwarded_port("Forwarding from 127.0.0.1:41235 -> 15672\n") == 41235
    assert kubeplans.forwarded_port("Forwarding from [::1]:41235 -> 15672") is None
    assert kubeplans.forwarded_port("Handling connection for 41235") is None


def test_the_ui_lines_say_where_and_as_whom() -> None:
    lines = kubeplans.ui_lines("https", 15671, "hutch", "team-a", "b")
    assert lines[0] == "Management UI of Broker team-a/b: https://localhost:15671/"
    assert "kubectl hutch secrets -n team-a b" in lines[1]
    assert "b.team-a.svc" in lines[2]


def test_tail_follows_the_broker_container_by_its_labels() -> None:
    assert kubeplans.tail("b", follow=True, lines=-1) == [
        "logs", "-l", "app.kubernetes.io/name=hutch-broker,app.kubernetes.io/instance=b",
        "-c", "hutch-broker", "--prefix", "--tail=-1", "--follow",
    ]  # fmt: skip
    assert "--follow" not in kubeplans.tail("b", follow=False, lines=20)


def test_pause_annotates_brokers_or_any_hutch_kind() -> None:
    assert kubeplans.pause(["b", "queue/orders", "hq/x"], paused=True) == [
        ["annotate", "--overwrite", "brokers.hutch.dev", "b", "hutch.dev/pause-reconciliation=true"],
        ["annotate", "--overwrite", "queues.hutch.dev", "orders", "hutch.dev/pause-reconciliation=true"],
        ["annotate", "--overwrite", "queues.hutch.dev", "x", "hutch.dev/pause-reconciliation=true"],
    ]  # fmt: skip
    assert kubeplans.pause(["users.hutch.dev/app"], paused=False) == [
        ["annotate", "--overwrite", "users.hutch.dev", "app", "hutch.dev/pause-reconciliation-"]
    ]


def test_a_typo_in_any_ref_pauses_nothing() -> None:
    with pytest.raises(kubeplans.PlanError, match="'pod/x'"):
        kubeplans.pause(["b", "pod/x"], paused=True)


def test_list_paused_shows_only_annotated_objects() -> None:
    def item(kind: str, name: str, annotations: dict) -> dict:
        return {"kind": kind, "metadata": {"name": name, "namespace": "ns",
                                           "annotations": annotations}}  # fmt: skip

    listed = {"items": [item("Broker", "b", {"hutch.dev/pause-reconciliation": "true"}),
                        item("Queue", "orders", {}),
                        item("Queue", "longer-name", {"hutch.dev/pause-reconciliation": "true"})]}  # fmt: skip
    assert kubeplans.paused_lines(listed) == [
        "NAMESPACE   KIND     NAME",
        "ns          Broker   b",
        "ns          Queue    longer-name",
    ]
    assert kubeplans.paused_lines({"items": []}) == ["No paused Hutch objects."]


BROKER = {"metadata": {"name": "b", "namespace": "ns"}, "spec": {}}
STATEFULSET = {"metadata": {"name": "b-server"}, "spec": {"template": {"spec": {
    "imagePullSecrets": [{"name": "pull"}],
    "containers": [{"name": "hutch-broker", "image": "localhost/hutch-broker:1",
                    "imagePullPolicy": "Never"}]}}}}  # fmt: skip


def test_the_perf_test_job_runs_the_generator_in_the_brokers_image() -> None:
    job = kubejobs.perf_test_job(BROKER, STATEFULSET, service("amqp", "management"), ["-z", "5"])
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["image"] == "localhost/hutch-broker:1"
    assert container["imagePullPolicy"] == "Never"
    assert pod["imagePullSecrets"] == [{"name": "pull"}]
    assert container["command"] == [
        "python", "-m", "hutch_cli.perftest", "--uri", "amqp://b:5672/%2F", "-z", "5"
    ]  # fmt: skip
    # The password comes from the Secret at run time, never from the Job's spec.
    assert [e["valueFrom"]["secretKeyRef"] for e in container["env"]] == [
        {"name": "b-default-user", "key": "username"},
        {"name": "b-default-user", "key": "password"},
    ]
    assert job["metadata"]["generateName"] == "b-perf-test-"
    assert job["spec"]["activeDeadlineSeconds"] == 5 + kubejobs.SLACK_SECONDS
    assert job["spec"]["backoffLimit"] == 0


def test_a_tls_only_broker_is_tested_over_amqps_with_its_ca() -> None:
    broker = {**BROKER, "spec": {"tls": {"secretName": "tls", "caSecretName": "ca"}}}
    job = kubejobs.perf_test_job(broker, STATEFULSET, service("amqps", "management-tls"), [])
    pod = job["spec"]["template"]["spec"]
    command = pod["containers"][0]["command"]
    assert command[3:] == ["--uri", "amqps://b.ns.svc:5671/%2F",
                           "--cacert", "/etc/hutch-perf-test/ca.crt"]  # fmt: skip
    assert pod["volumes"][0]["secret"]["secretName"] == "ca"


def test_bad_generator_options_create_no_job() -> None:
    with pytest.raises(kubeplans.PlanError, match="perf-test"):
        kubejobs.perf_test_job(BROKER, STATEFULSET, service("amqp"), ["-z", "-3"])
    with pytest.raises(kubeplans.PlanError, match="perf-test"):
        kubejobs.validate(["--bogus"])


@pytest.mark.parametrize(
    ("status", "state"),
    [
        ({}, "running"),
        ({"conditions": [{"type": "Complete", "status": "True"}]}, "succeeded"),
        ({"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]},
         "failed: BackoffLimitExceeded"),
        ({"conditions": [{"type": "Failed", "status": "False"}]}, "running"),
    ],
)  # fmt: skip
def test_job_state(status: dict, state: str) -> None:
    assert kubejobs.job_state({"status": status}) == state


def test_the_ca_and_name_ctl_verifies_a_tls_broker_with() -> None:
    broker = {"metadata": {"name": "b", "namespace": "ns"}, "spec": {"tls": {"secretName": "t"}}}
    assert kubeplans.tls_ca_secret(broker) == "t"
    broker["spec"]["tls"]["caSecretName"] = "ca"
    assert kubeplans.tls_ca_secret(broker) == "ca"
    assert kubeplans.tls_ca_secret({"metadata": {}, "spec": {}}) is None
    assert kubeplans.service_host(broker) == "b.ns.svc"


def test_version_is_a_verb_and_a_flag() -> None:
    assert kubeargs.parse(["version"]).verb == "version"
    assert kubeargs.parse(["--version"]).verb == "version"
    with pytest.raises(kubeargs.UsageError):
        kubeargs.parse(["--version", "extra"])
