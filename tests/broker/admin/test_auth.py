"""Authentication and the tag rules, as pure functions (the HTTP side is in test_http_access)."""

import base64

import pytest
from hutch_broker.admin import auth, errors
from hutch_broker.model import access


def basic(user, password):
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


def test_parse_basic():
    assert auth.parse_basic(basic("guest", "a:b")) == ("guest", "a:b")
    assert auth.parse_basic(None) is None
    assert auth.parse_basic("Bearer x") is None
    assert auth.parse_basic("Basic !!!") is None
    assert auth.parse_basic("Basic " + base64.b64encode(b"nocolon").decode()) is None


def test_authenticate_guest_from_loopback(broker):
    assert auth.authenticate(broker, basic("guest", "guest"), "127.0.0.1").name == "guest"
    assert auth.authenticate(broker, basic("guest", "guest"), "::1").name == "guest"


@pytest.mark.parametrize(
    ("header", "remote", "reason"),
    [
        (None, "127.0.0.1", "Not_Authorized"),
        (basic("guest", "wrong"), "127.0.0.1", "Not_Authorized"),
        (basic("nobody", "x"), "127.0.0.1", "Not_Authorized"),
        (basic("guest", "guest"), "10.1.2.3", "User can only log in via localhost"),
    ],
)
def test_authentication_failures(broker, header, remote, reason):
    with pytest.raises(errors.ApiError) as caught:
        auth.authenticate(broker, header, remote)
    assert caught.value.status == 401
    assert caught.value.body == {"error": "not_authorized", "reason": reason}


def test_remote_login_for_users_outside_loopback_users(broker):
    broker.put_user("ops", access.hash_password("pw"), ["management"])
    assert auth.authenticate(broker, basic("ops", "pw"), "10.1.2.3").name == "ops"


def test_users_without_management_tags_are_refused(broker):
    broker.put_user("app", access.hash_password("pw"), [])
    with pytest.raises(errors.ApiError, match="Not management user"):
        auth.authenticate(broker, basic("app", "pw"), "127.0.0.1")


def test_visibility_by_tag(broker):
    broker.add_vhost("other")
    broker.put_user("mon", "", ["monitoring"])
    broker.put_user("mgr", "", ["management"])
    broker.set_permission("/", "mgr", ".*", ".*", ".*")
    names = {
        user: [v.name for v in auth.visible_vhosts(broker, broker.users[user])]
        for user in ("guest", "mon", "mgr")
    }
    assert names == {"guest": ["/", "other"], "mon": ["/", "other"], "mgr": ["/"]}
    with pytest.raises(errors.ApiError, match="not authorised to access virtual host"):
        auth.vhost_for_writing(broker, broker.users["mon"], "other")
    with pytest.raises(errors.ApiError) as caught:
        auth.vhost_for_reading(broker, broker.users["mgr"], "missing")
    assert caught.value.status == 404


def test_amqp_permission_check(broker):
    broker.put_user("ro", "", ["management"])
    broker.set_permission("/", "ro", "", "", ".*")
    auth.check(broker, broker.users["ro"], "/", "read", "queue", "q")
    with pytest.raises(errors.ApiError) as caught:
        auth.check(broker, broker.users["ro"], "/", "configure", "queue", "q")
    assert caught.value.body["reason"] == "access to queue 'q' in vhost '/' refused for user 'ro'"
