"""Fixtures for the Web UI's tests: one hutch-broker and one headless Chromium per module.

The browser tests drive the real UI in Debian's Chromium (testing/hutch_testing/browser.py)
against a real hutch-broker process. A missing or broken Chromium skips them on a developer
machine and fails them in CI (``CI`` set) or with ``HUTCH_BROWSER_REQUIRED=1``, as the
reference RabbitMQ does (hutch_testing.pytest_plugin): CI can never go green without them.

``HUTCH_UI_SCREENSHOTS=1`` makes the tests rewrite docs/ui/*.png; otherwise screenshots go to
the test's temporary directory only, so a CI run never changes the tree.
"""

import base64
import json
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hutch_testing import brokers, browser, levels

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "docs" / "ui"
_FALSE = ("", "0", "false", "no")


def browser_required() -> bool:
    in_ci = os.environ.get("CI", "").strip().lower() not in _FALSE
    return in_ci or os.environ.get("HUTCH_BROWSER_REQUIRED") == "1"


@pytest.fixture(scope="module")
@levels.broker_level
def ui_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[brokers.HutchBroker]:
    broker = brokers.HutchBroker(work_dir=tmp_path_factory.mktemp("hutch"))
    broker.start()
    yield broker
    broker.stop()


@pytest.fixture(scope="module")
@levels.broker_level
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[browser.Chromium]:
    work_dir = tmp_path_factory.mktemp("chromium")
    try:
        driven = browser.Chromium(work_dir).start()
    except browser.BrowserStartError as error:
        if browser_required():
            pytest.fail(
                f"Chromium is required here (CI or HUTCH_BROWSER_REQUIRED=1) but "
                f"cannot start: {error}",
                pytrace=False,
            )
        pytest.skip(f"Chromium unavailable: {str(error).splitlines()[0]}")
    yield driven
    driven.quit()


@pytest.fixture
def shoot(chromium: browser.Chromium, tmp_path: Path):
    """``shoot("queues")``: docs/ui/queues.png under HUTCH_UI_SCREENSHOTS=1, else tmp_path."""

    def take(name: str) -> Path:
        keep = os.environ.get("HUTCH_UI_SCREENSHOTS") == "1"
        path = (SCREENSHOTS if keep else tmp_path) / f"{name}.png"
        chromium.execute("window.scrollTo(0, 0); document.activeElement.blur();")
        chromium.screenshot(path)
        return path

    return take


class Api:
    """The management API over urllib, as guest: what the tests check the UI's work with."""

    def __init__(self, broker: brokers.HutchBroker) -> None:
        self.base = f"http://127.0.0.1:{broker.http_port}"
        self.authorization = "Basic " + base64.b64encode(b"guest:guest").decode()

    def call(
        self, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.base + path, data=data, method=method)  # noqa: S310
        request.add_header("Authorization", self.authorization)
        request.add_header("Content-Type", "application/json")
        for key, value in (headers or {}).items():
            request.add_header(key, value)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 - loopback
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as error:
            raw = error.read()
            return error.code, json.loads(raw) if raw else None

    def get(self, path: str) -> Any:
        status, body = self.call("GET", path)
        assert status == 200, (path, status, body)
        return body


@pytest.fixture(scope="module")
def api(ui_broker: brokers.HutchBroker) -> Api:
    return Api(ui_broker)


@pytest.fixture(scope="module")
def base_url(ui_broker: brokers.HutchBroker) -> str:
    return f"http://127.0.0.1:{ui_broker.http_port}/"


def _login(
    chromium: browser.Chromium, base_url: str, user: str = "guest", password: str = "guest"
) -> None:
    """Open the UI afresh (a logged-out tab) and log in through the form."""
    chromium.get(base_url)
    chromium.execute(
        "sessionStorage.clear(); sessionStorage.setItem('hutch.refresh-seconds', '1');"
    )
    chromium.get(base_url)  # a new document: nothing of the last test's page is left
    chromium.wait(lambda: chromium.find("#username"), what="the login form")
    chromium.find("#username").type(user)
    chromium.find("#password").type(password)
    chromium.find("#login-submit").click()


@pytest.fixture
def login():
    """``login(chromium, base_url, user, password)``: log in through the form of a fresh tab."""
    return _login
