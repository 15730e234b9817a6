"""The Web UI's files and the API's cross-site guard, without a browser (fast, in memory).

The browser tests (test_browser.py) show the UI working; these pin the rules it rests on: the
page and its scripts are served with a strict Content-Security-Policy, only known files are
served, no script builds HTML from strings, and the API refuses writes a browser marks as
coming from another site while programs (which send no such headers) are unaffected.
"""

import re

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from hutch_broker.admin.app import make_app
from hutch_broker.admin.ui import assets, crossorigin
from hutch_broker.dispatch.context import Context
from hutch_broker.model.broker import Broker
from hutch_testing import levels

GUEST = {"Authorization": aiohttp.encode_basic_auth("guest", "guest")}
# Ways to turn a string into markup or code; the UI uses none of them (static/js/dom.js).
STRING_TO_MARKUP = re.compile(
    r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|"
    r"setTimeout\(\s*['\"`]|DOMParser|createContextualFragment|srcdoc"
)


@pytest.fixture
def broker() -> Broker:
    broker = Broker(cluster_name="hutch@localhost", clock=lambda: 0)
    broker.create_defaults()
    return broker


@pytest.fixture
@levels.broker_level  # aiohttp's TestServer listens on loopback
async def client(broker):
    app = make_app(Context(broker, clock=lambda: 0))
    async with TestClient(TestServer(app, host="127.0.0.1")) as test_client:
        yield test_client


async def test_the_page_is_served_at_the_root_with_a_strict_policy(client):
    async with client.get("/") as response:
        assert response.status == 200
        assert response.headers["Content-Type"] == "text/html; charset=utf-8"
        csp = response.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert "frame-ancestors 'none'" in csp
        assert response.headers["X-Frame-Options"] == "DENY"
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        page = await response.text()
    assert 'src="ui/js/app.js"' in page


async def test_every_script_and_module_it_imports_is_served(client):
    served = assets.load()
    for name, (body, content_type) in served.items():
        if not name.endswith(".js"):
            continue
        assert content_type == "text/javascript; charset=utf-8"
        folder = name.rpartition("/")[0]
        for imported in re.findall(r"from '(\./[^']+|\.\./[^']+)'", body.decode()):
            parts = [*folder.split("/"), *imported.split("/")]
            resolved: list[str] = []
            for part in parts:
                if part == "..":
                    resolved.pop()
                elif part not in (".", ""):
                    resolved.append(part)
            assert "/".join(resolved) in served, (name, imported)
    for name in ("js/app.js", "style.css", "favicon.svg"):
        async with client.get(f"/ui/{name}") as response:
            assert response.status == 200, name
            assert "Content-Security-Policy" in response.headers


@pytest.mark.parametrize(
    "path",
    [
        "/ui/nope.js",
        "/ui/../assets.py",
        "/ui/js/../../assets.py",
        "/ui/%2e%2e/assets.py",
        "/index.html",
    ],
)
async def test_only_known_files_are_served(client, path):
    async with client.get(path) as response:
        assert response.status == 404
        assert response.content_type == "application/json"


def test_no_script_turns_a_string_into_markup():
    scripts = {
        name: body.decode() for name, (body, _) in assets.load().items() if name.endswith(".js")
    }
    assert len(scripts) >= 8
    for name, text in scripts.items():
        code = "\n".join(line for line in text.splitlines() if not line.strip().startswith("//"))
        assert STRING_TO_MARKUP.findall(code) == [], name


@pytest.mark.parametrize(
    ("method", "origin", "fetch_site", "host", "refused"),
    [
        ("GET", "http://evil.example", "cross-site", "h:15672", False),  # reads: never
        ("POST", None, None, "h:15672", False),  # programs send neither header
        ("POST", "http://evil.example", None, "h:15672", True),
        ("PUT", "null", None, "h:15672", True),  # sandboxed frames, data: URLs
        ("DELETE", "http://h:15672", None, "h:15672", False),
        ("POST", "http://H:15672", None, "h:15672", False),
        ("POST", "http://h:15673", None, "h:15672", True),
        ("POST", "http://h", None, "h:80", False),  # the default port, written or not
        ("POST", "http://h:15672", "cross-site", "h:15672", True),
        ("POST", None, "same-site", "h:15672", True),
        ("POST", "https://ui.example", "same-origin", "backend:15672", False),  # proxy rewrote Host
        ("POST", None, "none", "h:15672", False),  # typed into the address bar
    ],
)
def test_cross_site_refusals(method, origin, fetch_site, host, refused):
    reason = crossorigin.refusal(
        method=method, origin=origin, fetch_site=fetch_site, host=host, scheme="http"
    )
    assert (reason is not None) == refused, reason


async def test_the_api_refuses_a_cross_site_write_before_changing_anything(client, broker):
    foreign = {**GUEST, "Origin": "http://evil.example"}
    async with client.put("/api/vhosts/forged", headers=foreign, data="{}") as response:
        assert response.status == 403
        assert await response.json() == {
            "error": "forbidden",
            "reason": "cross-origin request refused (Origin does not match Host)",
        }
    assert "forged" not in broker.vhosts
    cross_site = {**GUEST, "Sec-Fetch-Site": "cross-site"}
    body = '{"vhosts": [{"name": "imported"}]}'
    async with client.post("/api/definitions", headers=cross_site, data=body) as response:
        assert response.status == 403
    assert "imported" not in broker.vhosts
    async with client.get("/api/vhosts", headers=foreign) as response:
        assert response.status == 200  # a read: the other site cannot see the answer anyway

    own = {**GUEST, "Origin": f"http://127.0.0.1:{client.port}", "Sec-Fetch-Site": "same-origin"}
    async with client.put("/api/vhosts/mine", headers=own, data="{}") as response:
        assert response.status == 201
    async with client.put("/api/vhosts/tool", headers=GUEST, data="{}") as response:
        assert response.status == 201  # no browser headers: hutchctl, the operator, curl
    assert {"mine", "tool"} <= set(broker.vhosts)
