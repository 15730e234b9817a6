"""Topic permissions are definitions: they survive a restart, and go with their user."""

from hutch_demo import management


def test_topic_permissions_survive_a_restart_and_leave_with_the_user(hutch_broker):
    api = management.Management(hutch_broker)
    for user in ("kept", "gone"):
        assert api.put(f"/users/{user}", {"password": "pw", "tags": ""}).status == 201
        body = {"exchange": "amq.topic", "write": "^a", "read": ""}
        assert api.put(f"/topic-permissions/%2F/{user}", body).status == 201
        body["write"] = "^{username}\\."  # replaces the entry, in the journal too
        assert api.put(f"/topic-permissions/%2F/{user}", body).status == 204
    assert api.delete("/users/gone").status == 204
    hutch_broker.restart()
    api = management.Management(hutch_broker)
    listed = api.get("/topic-permissions").body
    assert listed == [{"user": "kept", "vhost": "/", "exchange": "amq.topic",
                       "write": "^{username}\\.", "read": ""}]  # fmt: skip
    assert api.delete("/topic-permissions/%2F/kept").status == 204
    hutch_broker.restart()
    assert management.Management(hutch_broker).get("/topic-permissions").body == []
