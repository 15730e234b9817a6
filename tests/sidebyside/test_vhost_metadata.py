"""A vhost PUT replaces its description and tags on both brokers (RabbitMQ 3.10.8's rule).

Why it matters: the operator's Vhost sweep compares description and tags with the spec; a
broker that kept an old description when given "" made every sweep a DriftCorrected write.
"""

from __future__ import annotations

from typing import Any


def _metadata(api: Any, vhost: str) -> tuple[str, list[str]]:
    body = api.get(f"/vhosts/{vhost}").body
    return body["description"], body["tags"]


def test_a_vhost_put_replaces_description_and_tags(target: Any, request: Any) -> None:
    api, vhost = target.api, target.name("vh")
    request.addfinalizer(lambda: api.delete(f"/vhosts/{vhost}"))
    assert api.put(f"/vhosts/{vhost}", {"description": "x", "tags": ["a"]}).status == 201
    assert api.put(f"/vhosts/{vhost}", {"description": ""}).status == 204
    assert _metadata(api, vhost) == ("", [])
    assert api.put(f"/vhosts/{vhost}", {"description": "y", "tags": ["b"]}).status == 204
    assert _metadata(api, vhost) == ("y", ["b"])
    assert api.put(f"/vhosts/{vhost}", {}).status == 204
    assert _metadata(api, vhost) == ("", [])
