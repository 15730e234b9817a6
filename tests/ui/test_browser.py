"""The Web UI in a real headless Chromium against a real hutch-broker (issue 27, part 2).

One broker and one browser for the module; each test logs in afresh. The checks go through
the management API (and AMQP with pika), never through the page alone: a policy made with the
form must be the policy the API returns, a depth the page shows must follow messages published
over AMQP, and a write another site makes the browser send must change nothing.
"""

import base64
import http.server
import json
import shutil
import subprocess
import sys
import threading
import urllib.parse
from pathlib import Path

import pytest
from hutch_testing import browser, clients
from hutch_testing.progress import Watch, wait_until

pytestmark = pytest.mark.timeout(120)

PASSWORD = "ui-s3cret-pass"  # distinctive, so the log check below cannot match by chance
XSS_QUEUE = "<img src=x onerror=alert(1)>"
XSS_BODY = '<img src=y onerror=alert(2)><script>alert(3)</script> & "quotes"'


@pytest.fixture(scope="module")
def ui_user(api) -> str:
    assert api.call("PUT", "/api/users/ui-admin", {"password": PASSWORD, "tags": "administrator"})[
        0
    ] in (201, 204)
    assert api.call(
        "PUT", "/api/permissions/%2F/ui-admin", {"configure": ".*", "write": ".*", "read": ".*"}
    )[0] in (201, 204)
    return "ui-admin"


@pytest.fixture
def logged_in(chromium, base_url, ui_user, login) -> None:
    login(chromium, base_url, ui_user, PASSWORD)
    chromium.wait_text("#total-exchanges", lambda text: text != "", what="the overview")


def test_login_refuses_a_wrong_password_and_keeps_credentials_out_of_urls_cookies_and_logs(
    chromium, base_url, ui_broker, ui_user, shoot, login
):
    login(chromium, base_url, ui_user, "not-the-password")
    status = chromium.wait_text("#login-status", lambda text: "failed" in text)
    assert "Login failed" in status
    assert chromium.execute("return sessionStorage.getItem('hutch.authorization')") is None

    login(chromium, base_url, ui_user, PASSWORD)
    chromium.wait_text("#user", lambda text: text == f"User {ui_user}")
    header = chromium.execute("return sessionStorage.getItem('hutch.authorization')")
    assert header == "Basic " + base64.b64encode(f"{ui_user}:{PASSWORD}".encode()).decode()
    assert chromium.execute("return document.cookie") == ""
    assert chromium.execute("return localStorage.length") == 0
    assert PASSWORD not in chromium.url and ui_user not in chromium.url
    chromium.wait_text("#total-exchanges", lambda text: text == "7")
    shoot("overview")

    chromium.find("#logout").click()
    chromium.wait(lambda: chromium.find("#login"), what="the login form after logging out")
    assert chromium.execute("return sessionStorage.getItem('hutch.authorization')") is None

    log = ui_broker.console_log.read_text(errors="replace")
    assert PASSWORD not in log
    assert base64.b64encode(f"{ui_user}:{PASSWORD}".encode()).decode() not in log
    assert chromium.console() == [] or all(
        entry["level"] != "SEVERE" or "401" in entry["message"] for entry in chromium.console()
    )


def hutchctl(broker, *args):
    """hutchctl (cli/, the product's console script) against the module's broker, as guest."""
    command = shutil.which("hutchctl", path=str(Path(sys.executable).parent))
    assert command is not None, "hutchctl is not installed: run make bootstrap"
    result = subprocess.run(
        [command, "--url", f"http://127.0.0.1:{broker.http_port}", "--username", "guest",
         "--password", "guest", *args],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result.stdout


def test_a_policy_made_with_the_form_is_the_policy_the_api_and_hutchctl_return(
    chromium, base_url, api, ui_broker, logged_in, shoot
):
    chromium.get(base_url + "#/admin/policies")
    form = chromium.wait(lambda: chromium.find("#policy-form"), what="the policy form")
    form.find("#policy-name").type("ui-max-length")
    form.find("#policy-pattern").type("^ui\\.")
    form.find("#policy-apply-to option[value='queues']").click()
    form.find("#policy-priority").type("3")
    form.find("button[data-key='max-length']").click()
    form.find(".typed-row .arg-value").type("1000")
    form.find("button[data-key='message-ttl']").click()
    form.find_all(".typed-row .arg-value")[1].type("60000")
    form.find("button[type='submit']").click()
    chromium.wait(lambda: form.find(".status").text, lambda text: text == "Policy saved.")

    assert api.get("/api/policies/%2F/ui-max-length") == {
        "vhost": "/",
        "name": "ui-max-length",
        "pattern": "^ui\\.",
        "apply-to": "queues",
        "definition": {"max-length": 1000, "message-ttl": 60000},
        "priority": 3,
    }
    chromium.wait_text("#policies", lambda text: "ui-max-length" in text)
    listed = hutchctl(ui_broker, "list_policies", "-p", "/", "--formatter", "json")
    (from_ctl,) = [item for item in json.loads(listed) if item["name"] == "ui-max-length"]
    assert (from_ctl["pattern"], from_ctl["apply-to"], from_ctl["priority"]) == (
        "^ui\\.",
        "queues",
        3,
    )
    # rabbitmqctl's json formatter prints a policy's definition as a JSON string; hutchctl too
    assert json.loads(from_ctl["definition"]) == {"max-length": 1000, "message-ttl": 60000}

    operator_form = chromium.find("#operator-policy-form")
    operator_form.find("#operator-policy-name").type("ui-op-cap")
    operator_form.find("#operator-policy-pattern").type("^ui\\.")
    operator_form.find("button[data-key='max-length-bytes']").click()
    operator_form.find(".typed-row .arg-value").type("1048576")
    operator_form.find("button[type='submit']").click()
    chromium.wait(
        lambda: operator_form.find(".status").text, lambda text: text == "Operator policy saved."
    )
    operator_policy = api.get("/api/operator-policies/%2F/ui-op-cap")
    assert (operator_policy["apply-to"], operator_policy["definition"]) == (
        "queues",
        {"max-length-bytes": 1048576},
    )
    chromium.wait_text("#operator-policies", lambda text: "ui-op-cap" in text)
    shoot("policies")

    # A value that is not a number for a Number row: refused in the page, nothing written.
    form.find("#policy-name").clear()
    form.find("#policy-name").type("ui-bad")
    form.find_all(".typed-row .arg-value")[0].clear()
    form.find_all(".typed-row .arg-value")[0].type("lots")
    form.find("button[type='submit']").click()
    chromium.wait(lambda: form.find(".status").text, lambda text: "not a number" in text)
    assert api.call("GET", "/api/policies/%2F/ui-bad")[0] == 404


# The page's refreshes, counted: each answer to its GET of a queue (the path in arguments[0]),
# the queue's total in order, read off a copy of the response the page itself renders.
COUNT_DEPTH_READS = """
const path = arguments[0];
window.depthReads = [];
const original = window.fetch;
window.fetch = async (...args) => {
  const response = await original(...args);
  if (new URL(String(args[0]), document.baseURI).pathname.endsWith(path) && response.ok) {
    try {
      window.depthReads.push((await response.clone().json()).messages);
    } catch (error) {
      window.depthReads.push(String(error));  // shown in the failure, never a depth
    }
  }
  return response;
};
"""
# The page refreshes every second: this long without an answer to it is a stalled page.
PAGE_STALL_S = 30.0


def _depth_reads(chromium) -> list[object]:
    return list(chromium.execute("return window.depthReads"))


def _shows(chromium, css: str, text: str) -> bool:
    try:
        return chromium.find(css).text == text
    except browser.WebDriverError as error:  # redrawn between the find and the read
        if error.error in ("no such element", "stale element reference"):
            return False
        raise


def _wait_for_the_broker(api, path: str, total: int) -> None:
    """Until the management API counts ``total`` messages (published without confirms)."""
    wait_until(
        lambda: api.get(path)["messages"] == total,
        Watch(f"{total} messages in the broker", "the API's count", lambda: api.get(path)["messages"],
              stall_s=PAGE_STALL_S),
    )  # fmt: skip


def test_the_queue_page_follows_the_depth_while_messages_are_published(
    chromium, base_url, api, ui_broker, logged_in, shoot
):
    connection = clients.connect(ui_broker)
    try:
        channel = connection.channel()
        channel.queue_declare("ui.depth", durable=True)
        channel.queue_declare("ui.other")
        chromium.get(base_url + "#/queues/%2F/ui.depth")
        chromium.wait_text("#messages-total", lambda text: text == "0")
        chromium.execute("window.notReloaded = true;")
        chromium.execute(COUNT_DEPTH_READS, "/api/queues/%2F/ui.depth")
        seen = []
        for total in (5, 25, 60):
            for _ in range(total - (seen[-1] if seen else 0)):
                channel.basic_publish("", "ui.depth", b"payload")
            _wait_for_the_broker(api, "/api/queues/%2F/ui.depth", total)
            asked = _depth_reads(chromium)  # the page's answers before the broker had them
            shown = f"the page's depth of {total}"
            wait_until(
                lambda t=total: _shows(chromium, "#messages-total", str(t)),
                Watch(shown, "the page's reads of the queue", lambda: len(_depth_reads(chromium)),
                      stall_s=PAGE_STALL_S),
            )  # fmt: skip
            seen.append(total)
            # refreshed by its own loop, not by a reload: the first answer after the broker had
            # them may have been asked before, the next one was asked after and carried them
            after = _depth_reads(chromium)[len(asked) :]
            assert total in after[:2], (
                f"{shown}: the page's reads after the broker had them were {after}"
            )
        assert chromium.execute("return window.notReloaded") is True
        assert chromium.find("#messages-ready").text == "60"
        assert api.get("/api/queues/%2F/ui.depth")["messages"] == 60
        # the policy from the form test applies, and the page says which and what it limits
        if api.call("GET", "/api/policies/%2F/ui-max-length")[0] == 200:
            chromium.wait_text("#queue-policy", lambda text: text == "ui-max-length")
            assert "max-length" in chromium.find("#queue-limits").text
        channel.basic_consume("ui.depth", lambda *args: None)
        chromium.wait(lambda: chromium.find("#consumers").text, lambda text: "ctag" in text)
        shoot("queue")
        chromium.get(base_url + "#/queues")
        chromium.wait_text("#queues-table", lambda text: "ui.depth" in text)
        shoot("queues")
        chromium.get(base_url + "#/connections")
        chromium.wait_text("#connections-table", lambda text: "guest" in text)
        shoot("connections")
        chromium.get(base_url + "#/exchanges")
        chromium.wait_text("#exchanges-table", lambda text: "amq.topic" in text)
        shoot("exchanges")
    finally:
        connection.close()

    chromium.get(base_url + "#/queues/%2F/ui.depth")
    chromium.wait_text("#messages-total", lambda text: text == "60")
    chromium.find("#purge").click()
    chromium.wait_text("#messages-total", lambda text: text == "0")
    assert api.get("/api/queues/%2F/ui.depth")["messages"] == 0


def test_names_and_message_bodies_show_as_text_never_as_markup(
    chromium, base_url, api, ui_broker, logged_in
):
    connection = clients.connect(ui_broker)
    try:
        channel = connection.channel()
        channel.queue_declare(XSS_QUEUE)
        channel.basic_publish("", XSS_QUEUE, XSS_BODY.encode())
    finally:
        connection.close()
    chromium.console()  # start from an empty console

    chromium.get(base_url + "#/queues")
    chromium.find("#filter").type("img")
    link = chromium.wait(
        lambda: chromium.find("#queues-table a"),
        lambda element: element.text == XSS_QUEUE,
        what="the queue's link",
    )
    assert (
        chromium.execute("return document.querySelectorAll('img, script[src=\"x\"]').length") == 0
    )
    link.click()
    chromium.wait_text("#queue-name", lambda text: text == XSS_QUEUE)
    as_in_js = urllib.parse.quote(XSS_QUEUE, safe="!'()*")  # encodeURIComponent's set
    assert chromium.url.endswith(f"#/queues/%2F/{as_in_js}")
    quoted = urllib.parse.quote(XSS_QUEUE, safe="")

    chromium.find("#get-messages button[type='submit']").click()
    payload = chromium.wait_text("pre.payload", lambda text: text != "")
    assert payload == XSS_BODY
    assert chromium.execute("return document.querySelectorAll('img').length") == 0
    assert chromium.execute("return document.querySelectorAll('body script').length") == 0
    console = settled(chromium, ["x", "y"])  # the srcs of the name's and the body's <img>
    assert chromium.alert_text() is None
    assert [entry for entry in console if entry["level"] == "SEVERE"] == []
    assert api.get(f"/api/queues/%2F/{quoted}")["messages"] == 1  # requeued, as asked


# Loads an image of each of arguments[0]'s URLs and counts in window.hutchProbe the ones whose
# load has ended (an error, or a load). Listeners, not attributes: the CSP refuses inline ones.
_PROBE = """
window.hutchProbe = 0;
for (const src of arguments[0]) {
  const image = new Image();
  for (const kind of ['error', 'load']) {
    image.addEventListener(kind, () => { window.hutchProbe += 1; });
  }
  image.src = src;
}
"""
_DONE = "hutch-test: the probe's images ended"


def settled(chromium, sources: list[str]) -> list[dict]:
    """Once what markup injected into the page would have done is done: the console's entries
    since the last read, for the checks of what such markup did (an alert, a refused handler).

    An injected ``<img src=y onerror=...>`` does its harm when its load fails: its handler runs
    (an alert) or the CSP refuses it (a console error). A probe image of the same URL, started
    after it, ends after it; so once every probe image's load has ended, an injected one's has,
    and a console line the test writes then comes after whatever that logged. A fixed sleep
    instead was a guess: too short on a slow machine, and it proved nothing on a fast one.
    The probe's own failed loads are left out (a 404 says nothing of a handler): what an
    injected image did shows as the CSP's refusal of its handler, or as an alert."""
    chromium.execute(_PROBE, sources)
    chromium.wait(
        lambda: chromium.execute("return window.hutchProbe"),
        lambda ended: ended == len(sources),
        what="the probe images' loads to end",
    )
    chromium.execute("console.warn(arguments[0])", _DONE)
    entries: list[dict] = []

    def logged_done() -> bool:
        entries.extend(chromium.console())
        return any(_DONE in entry["message"] for entry in entries)

    chromium.wait(logged_done, what="the test's console line after the probe")
    probed = tuple(urllib.parse.urljoin(chromium.url, source) for source in sources)

    def ours(entry: dict) -> bool:  # the marker, and the probe's own loads failing (a 404)
        message = entry["message"]
        return _DONE in message or (
            message.startswith(probed) and "Failed to load resource" in message
        )

    return [entry for entry in entries if not ours(entry)]


class _AttackerPage(http.server.BaseHTTPRequestHandler):
    """Another site: a page that makes the browser POST a publish to the broker (CSRF)."""

    target = ""

    def do_GET(self):
        # text/plain forms send name=value: together they make a JSON body the API accepts.
        name = (
            '{"routing_key":"ui.csrf","payload":"forged","payload_encoding":"string",'
            '"properties":{},"x":"'
        )
        page = (
            f'<form id="f" method="post" enctype="text/plain" action="{self.target}">'
            f"<input name='{name}' value='\"}}'></form>"
            "<script>document.getElementById('f').submit()</script>"
        )
        body = page.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_write_another_site_makes_the_browser_send_changes_nothing(chromium, ui_broker, api):
    assert api.call("PUT", "/api/queues/%2F/ui.csrf", {})[0] in (201, 204)
    # The browser holds Basic credentials for the broker, as after answering a native prompt.
    chromium.get(f"http://guest:guest@127.0.0.1:{ui_broker.http_port}/api/whoami")
    chromium.wait(lambda: chromium.find("body").text, lambda text: '"name":"guest"' in text)

    _AttackerPage.target = (
        f"http://127.0.0.1:{ui_broker.http_port}/api/exchanges/%2F/amq.default/publish"
    )
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AttackerPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        # localhost is another site than 127.0.0.1 (Sec-Fetch-Site: cross-site)
        chromium.get(f"http://localhost:{server.server_address[1]}/")
        answer = chromium.wait(
            lambda: chromium.find("body").text,
            lambda text: "refused" in text or "routed" in text,
            what="the broker's answer to the forged form",
        )
    finally:
        server.shutdown()
        server.server_close()
    assert "cross-site request refused" in answer
    assert api.get("/api/queues/%2F/ui.csrf")["messages"] == 0
