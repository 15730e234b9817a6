"""Headless Chromium driven over W3C WebDriver, for the Web UI's browser tests.

Why this and not Selenium: Debian's ``chromium-driver`` speaks the W3C WebDriver HTTP protocol,
and the tests need a dozen of its commands (new session, navigate, find, click, type, read text,
run a script, screenshot, look for an alert). A small client over ``urllib`` does that with no
new dependency and no version coupling between a Python package and Debian's driver; each call
is one JSON request whose errors come back as WebDriver's own ``error`` and ``message``.

``Chromium`` starts ``chromedriver`` on a free loopback port with its own log file, then one
browser session: ``--headless=new``, a fixed window size (screenshots are reproducible),
``--no-sandbox`` (root in CI containers has no user namespaces for the sandbox) and a
user-data-dir of its own, so no profile, cache or stored password is shared with anything else.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import json
import shutil
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar

from hutch_demo import ports

T = TypeVar("T")

CHROMIUM_CANDIDATES: Final = ("chromium", "chromium-browser")
DRIVER_CANDIDATES: Final = ("chromedriver",)
ELEMENT_KEY: Final = "element-6066-11e4-a52e-4f735466cecf"  # W3C WebDriver's element reference
WINDOW_SIZE: Final = (1280, 800)
INSTALL_HINT: Final = "install Debian's chromium and chromium-driver (scripts/install-ui-deps.sh)"


class BrowserStartError(RuntimeError):
    """Chromium or chromedriver is missing or would not start a session."""


class WebDriverError(RuntimeError):
    """A WebDriver command failed: ``error`` is WebDriver's code (``no such element``...)."""

    def __init__(self, error: str, message: str) -> None:
        super().__init__(f"{error}: {message}")
        self.error = error


def find_binaries() -> tuple[str, str]:
    """(chromium, chromedriver) from PATH, or BrowserStartError naming what is missing."""
    chromium = next(filter(None, map(shutil.which, CHROMIUM_CANDIDATES)), None)
    driver = next(filter(None, map(shutil.which, DRIVER_CANDIDATES)), None)
    missing = [
        name for name, path in (("chromium", chromium), ("chromedriver", driver)) if not path
    ]
    if chromium is None or driver is None:
        raise BrowserStartError(f"{' and '.join(missing)} not found on PATH: {INSTALL_HINT}")
    return chromium, driver


def _die_with_parent() -> None:
    """In the child: SIGKILL it if the test process dies first, so no driver outlives a run."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Element:
    """One element of the page, by its WebDriver reference."""

    def __init__(self, browser: Chromium, reference: str) -> None:
        self.browser = browser
        self.reference = reference

    def _call(self, method: str, suffix: str, body: dict[str, Any] | None = None) -> Any:
        return self.browser.command(method, f"/element/{self.reference}{suffix}", body)

    def click(self) -> None:
        self._call("POST", "/click", {})

    def type(self, text: str) -> None:
        self._call("POST", "/value", {"text": text})

    def clear(self) -> None:
        self._call("POST", "/clear", {})

    @property
    def text(self) -> str:
        return str(self._call("GET", "/text"))

    def property(self, name: str) -> Any:
        return self._call("GET", f"/property/{name}")

    def find(self, css: str) -> Element:
        found = self._call("POST", "/element", {"using": "css selector", "value": css})
        return Element(self.browser, found[ELEMENT_KEY])

    def find_all(self, css: str) -> list[Element]:
        found = self._call("POST", "/elements", {"using": "css selector", "value": css})
        return [Element(self.browser, item[ELEMENT_KEY]) for item in found]


class Chromium:
    """A chromedriver process and one headless Chromium session; ``quit()`` ends both."""

    def __init__(self, work_dir: Path, *, window: tuple[int, int] = WINDOW_SIZE) -> None:
        self.work_dir = work_dir
        self.window = window
        self.port = ports.free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.session = ""
        self.driver: subprocess.Popen[bytes] | None = None
        self.driver_log = work_dir / "chromedriver.log"

    # -- life cycle --------------------------------------------------------------------------

    def start(self, timeout: float = 30.0) -> Chromium:
        chromium, driver = find_binaries()
        self.work_dir.mkdir(parents=True, exist_ok=True)
        profile = self.work_dir / "profile"
        profile.mkdir(exist_ok=True)
        with self.driver_log.open("wb") as log:
            self.driver = subprocess.Popen(  # noqa: S603 - a fixed binary found on PATH
                [driver, f"--port={self.port}", "--allowed-ips=127.0.0.1"],
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - only a prctl, before exec
            )
        deadline = time.monotonic() + timeout
        while not self._driver_ready():
            if self.driver.poll() is not None or time.monotonic() > deadline:
                self.quit()
                raise BrowserStartError(f"chromedriver did not start: {self._log_tail()}")
            time.sleep(0.05)
        width, height = self.window
        options = {
            "binary": chromium,
            "args": [
                "--headless=new",
                "--no-sandbox",
                "--disable-dev-shm-usage",
                "--disable-gpu",
                "--no-first-run",
                "--disable-extensions",
                "--password-store=basic",
                "--force-device-scale-factor=1",
                f"--window-size={width},{height}",
                f"--user-data-dir={profile}",
            ],
        }
        capabilities = {
            "browserName": "chrome",
            "goog:chromeOptions": options,
            "goog:loggingPrefs": {"browser": "ALL"},
        }
        try:
            created = self._request(
                "POST", "/session", {"capabilities": {"alwaysMatch": capabilities}}, timeout
            )
        except (WebDriverError, OSError) as error:
            self.quit()
            raise BrowserStartError(f"no Chromium session: {error}; {self._log_tail()}") from error
        self.session = created["sessionId"]
        # The viewport itself at the window size (headless keeps room for absent toolbars).
        self.cdp(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )
        return self

    def quit(self) -> None:
        if self.session:
            with contextlib.suppress(WebDriverError, OSError):
                self._request("DELETE", f"/session/{self.session}", None, 10.0)
            self.session = ""
        if self.driver is not None and self.driver.poll() is None:
            self.driver.terminate()
            try:
                self.driver.wait(5)
            except subprocess.TimeoutExpired:
                self.driver.kill()
                self.driver.wait(5)

    def _driver_ready(self) -> bool:
        try:
            status = self._request("GET", "/status", None, 2.0)
        except (WebDriverError, OSError):
            return False
        return bool(status.get("ready"))

    def _log_tail(self) -> str:
        try:
            return self.driver_log.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no chromedriver log)"

    # -- the protocol ------------------------------------------------------------------------

    def _request(self, method: str, path: str, body: dict[str, Any] | None, timeout: float) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 - our own loopback driver
            self.base + path, data=data, method=method
        )
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
                payload = json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as error:
            payload = json.loads(error.read() or b"{}")
            value = payload.get("value") or {}
            raise WebDriverError(
                str(value.get("error", error.code)), str(value.get("message", ""))
            ) from None
        return payload.get("value")

    def command(
        self, method: str, path: str, body: dict[str, Any] | None = None, timeout: float = 60.0
    ) -> Any:
        """One command of this session: ``command("POST", "/url", {"url": ...})``."""
        return self._request(method, f"/session/{self.session}{path}", body, timeout)

    # -- what the tests use ------------------------------------------------------------------

    def get(self, url: str) -> None:
        self.command("POST", "/url", {"url": url})

    @property
    def url(self) -> str:
        return str(self.command("GET", "/url"))

    def find(self, css: str) -> Element:
        found = self.command("POST", "/element", {"using": "css selector", "value": css})
        return Element(self, found[ELEMENT_KEY])

    def find_all(self, css: str) -> list[Element]:
        found = self.command("POST", "/elements", {"using": "css selector", "value": css})
        return [Element(self, item[ELEMENT_KEY]) for item in found]

    def execute(self, script: str, *args: Any) -> Any:
        """Run ``script`` (a function body; ``arguments[0]``... are ``args``) in the page."""
        return self.command("POST", "/execute/sync", {"script": script, "args": list(args)})

    def cdp(self, command: str, params: dict[str, Any]) -> Any:
        """A DevTools protocol command through chromedriver (``goog/cdp/execute``)."""
        return self.command("POST", "/goog/cdp/execute", {"cmd": command, "params": params})

    def console(self) -> list[dict[str, Any]]:
        """The browser console's entries since the last call (errors, CSP violations...)."""
        return list(self.command("POST", "/se/log", {"type": "browser"}))

    def alert_text(self) -> str | None:
        """The text of an open alert, confirm or prompt; None when there is none."""
        try:
            return str(self.command("GET", "/alert/text"))
        except WebDriverError as error:
            if error.error == "no such alert":
                return None
            raise

    def screenshot(self, path: Path) -> None:
        """The viewport as PNG (``window`` pixels, device scale factor 1)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(base64.b64decode(self.command("GET", "/screenshot")))

    def wait(
        self,
        probe: Callable[[], T],
        predicate: Callable[[T], bool] = bool,
        *,
        timeout: float = 10.0,
        what: str = "the page",
    ) -> T:
        """Poll ``probe`` until ``predicate`` holds (an element may be missing meanwhile)."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            try:
                value = probe()
                if predicate(value):
                    return value
                last = value
            except WebDriverError as error:
                if error.error not in ("no such element", "stale element reference"):
                    raise
                last = error
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout}s waiting for {what}; last: {last!r}"
                )
            time.sleep(0.05)

    def wait_text(self, css: str, predicate: Callable[[str], bool], **kwargs: Any) -> str:
        kwargs.setdefault("what", f"the text of {css}")
        return self.wait(lambda: self.find(css).text, predicate, **kwargs)
