"""Broker trust II, item 3: a management path with a trailing slash is the path without it.

RabbitMQ's router (Cowboy) ignores a trailing slash, so tools that build URLs by joining
segments (``/api/queues/`` + vhost, or a bare ``/api/queues/``) work there; hutch-broker
answered 404. Each path is asked both ways on both brokers: same status, same body (listings
compared by the names they hold, as the brokers' other objects differ).
"""

import pytest
from hutch_demo.management import quote
from hutch_testing.sidebyside import Target

LISTS = [
    "/overview",
    "/vhosts",
    "/users",
    "/permissions",
    "/queues",
    "/queues/%2F",
    "/exchanges",
    "/exchanges/%2F",
    "/bindings",
    "/bindings/%2F",
    "/connections",
    "/channels",
    "/consumers",
    "/consumers/%2F",
    "/policies",
    "/policies/%2F",
    "/nodes",
    "/whoami",
    "/definitions",
]


def _names(body):
    if isinstance(body, list):
        return sorted(str(item.get("name", item.get("user", item))) for item in body)
    if isinstance(body, dict) and "queues" in body and "users" in body:  # a definitions export
        return sorted(item["name"] for item in body["queues"])
    return sorted(body) if isinstance(body, dict) else body


@pytest.mark.parametrize("path", LISTS)
def test_a_trailing_slash_is_ignored(target: Target, path):
    plain, slashed = target.api.get(path), target.api.get(path + "/")
    assert plain.status == 200
    assert (slashed.status, _names(slashed.body)) == (plain.status, _names(plain.body))


def test_item_paths_and_writes_take_a_trailing_slash(target: Target):
    name = quote(target.name("q"))
    assert target.api.put(f"/queues/%2F/{name}/", {"durable": False}).status == 201
    item = target.api.get(f"/queues/%2F/{name}/")
    assert (item.status, item.body["name"]) == (200, target.name("q"))
    assert target.api.get(f"/queues/%2F/{name}/bindings/").status == 200
    assert target.api.delete(f"/queues/%2F/{name}/").status == 204
    assert target.api.get(f"/queues/%2F/{name}").status == 404
    assert target.api.get("/no-such-thing/").status == 404
