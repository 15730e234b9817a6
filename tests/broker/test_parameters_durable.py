"""Global parameters and the generated cluster id survive restarts (issue 14: "Parameters")."""

import signal

import pytest
from hutch_demo.management import Management


@pytest.mark.parametrize("stop", [signal.SIGKILL, signal.SIGTERM])
def test_global_parameters_are_durable(hutch_broker, stop):
    api = Management(hutch_broker)
    first_id = api.get("/global-parameters/internal_cluster_id").body["value"]
    assert api.put("/global-parameters/team", {"value": {"owner": "blue", "n": [1, 2]}}).ok
    assert api.put("/cluster-name", {"name": "renamed"}).status == 204
    assert api.put("/global-parameters/gone", {"value": 1}).ok
    assert api.delete("/global-parameters/gone").status == 204
    hutch_broker.kill(stop)
    hutch_broker.start()

    values = {item["name"]: item["value"] for item in api.get("/global-parameters").body}
    assert values == {
        "internal_cluster_id": first_id,  # generated once, at first boot
        "team": {"owner": "blue", "n": [1, 2]},
        "cluster_name": "renamed",
    }
    assert api.get("/overview").body["cluster_name"] == "renamed"
