"""The installed hutchctl console script against a real hutch-broker: HTTP, HTTPS, credentials.

Why the real script: the entry point, the wheel's packaging and the I/O shell are what a user
runs; the pure parts are covered in the other files of this folder.
"""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hutch_demo import certs, ports
from hutch_testing.tlsbrokers import TLSHutchBroker

pytestmark = pytest.mark.broker  # level broker: runs hutchctl against a hutch-broker

HUTCHCTL = shutil.which("hutchctl", path=str(Path(sys.executable).parent))


def hutchctl(*args, env=None, input_text=None):
    assert HUTCHCTL is not None, "hutchctl is not installed: run make bootstrap"
    environment = {"PATH": "/usr/bin:/bin", **(env or {})}
    return subprocess.run(
        [HUTCHCTL, *args],
        capture_output=True,
        text=True,
        env=environment,
        input=input_text if input_text is not None else "",
        timeout=60,
        check=False,
    )


def test_a_session_over_http_with_the_url_from_the_environment(hutch_broker):
    env = {"HUTCH_URL": hutch_broker.http_url}
    assert hutchctl("add_vhost", "v1", env=env).returncode == 0
    done = hutchctl(
        "set_policy", "-p", "v1", "cap", "^q", '{"max-length":5}', "--apply-to", "queues", env=env
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        'Setting policy "cap" for pattern "^q" to "{"max-length":5}" with priority "0" for vhost "v1" ...\n',
        "",
    )
    listed = hutchctl("list_policies", "-p", "v1", "--formatter", "json", env=env)
    assert json.loads(listed.stdout) == [
        {
            "vhost": "v1",
            "name": "cap",
            "pattern": "^q",
            "apply-to": "queues",
            "definition": '{"max-length":5}',
            "priority": 0,
        }
    ]
    silent = hutchctl("-s", "list_vhosts", "name", "tracing", env=env)
    assert sorted(silent.stdout.splitlines()) == ["/\tfalse", "v1\tfalse"]


def test_a_password_from_stdin_and_a_credentials_file(hutch_broker, tmp_path):
    url = ["--url", hutch_broker.http_url]
    assert hutchctl(*url, "add_user", "ops", input_text="s3cret\n").returncode == 0
    assert hutchctl(*url, "set_user_tags", "ops", "administrator").returncode == 0
    creds = tmp_path / "creds"
    creds.write_text("username=ops\npassword=s3cret\n")
    who = hutchctl(*url, "--credentials-file", str(creds), "-q", "list_users")
    assert who.returncode == 0
    assert "ops\t[administrator]" in who.stdout.splitlines()
    creds.write_text("username=ops\npassword=wrong\n")
    refused = hutchctl(*url, "--credentials-file", str(creds), "list_users")
    assert refused.returncode == 69
    assert refused.stderr.startswith("Error: authentication failed (HTTP 401)")
    assert len(refused.stderr.splitlines()) == 1


def test_a_broker_that_is_down_is_one_line_and_69_never_a_traceback():
    url = f"http://127.0.0.1:{ports.free_port()}"
    down = hutchctl("--url", url, "list_queues")
    assert down.returncode == 69
    assert down.stderr.startswith(f"Error: unable to reach the broker: {url}")
    assert "Traceback" not in down.stderr
    assert len(down.stderr.splitlines()) == 1
    waited = hutchctl("--url", url, "await_startup", "--timeout", "1")
    assert waited.returncode == 69


def test_https_with_a_ca_file(tmp_path):
    authority = certs.Authority()
    leaf = authority.issue("hutch-broker", hosts=("127.0.0.1", "localhost"))
    broker = TLSHutchBroker(leaf=leaf, plain=False, work_dir=tmp_path / "tls").start()
    try:
        ca = tmp_path / "ca.pem"
        ca.write_bytes(authority.pem)
        url = ["--url", broker.https_url]
        trusted = hutchctl(*url, "--cacert", str(ca), "-q", "list_vhosts")
        assert (trusted.returncode, trusted.stdout) == (0, "name\n/\n")
        untrusted = hutchctl(*url, "list_vhosts")
        assert untrusted.returncode == 69
        assert "CERTIFICATE_VERIFY_FAILED" in untrusted.stderr
        missing_ca = hutchctl(*url, "--cacert", str(tmp_path / "nope.pem"), "list_vhosts")
        assert missing_ca.returncode == 65
        assert missing_ca.stderr.startswith("Error: cannot use --cacert")
    finally:
        broker.stop()


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["nosuchverb"], 64),
        (["set_policy", "x"], 64),
        (["list_queues", "--bogus"], 64),
        ([], 64),
    ],
)
def test_usage_errors_need_no_broker(args, code):
    result = hutchctl("--url", "http://127.0.0.1:1", *args)
    assert result.returncode == code
    assert len(result.stderr.splitlines()) == 1


def test_help_lists_every_verb():
    shown = hutchctl("--help")
    assert shown.returncode == 0
    assert "set_operator_policy" in shown.stdout
