"""hutchctl through a port-forward to a TLS-only broker: HUTCH_SERVER_NAME.

``kubectl hutch ctl`` reaches a TLS-only Broker through ``kubectl port-forward``
on 127.0.0.1, but the broker's certificate names its Service (``hutch.team-a.svc``), so the
certificate is verified for that name while the connection goes to loopback (as curl's
``--resolve`` does). Without the name, verification fails and hutchctl says so in one line.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hutch_demo import certs
from hutch_testing.tlsbrokers import TLSHutchBroker

pytestmark = pytest.mark.broker  # level broker: a hutch-broker of its own

HUTCHCTL = shutil.which("hutchctl", path=str(Path(sys.executable).parent))
SERVICE = "hutch.team-a.svc"


@pytest.fixture
def tls_only(tmp_path):
    """Its plain listeners stay on only for the harness's readiness probe; hutchctl is given
    the HTTPS URL on 127.0.0.1, which the certificate does not name."""
    authority = certs.Authority()
    leaf = authority.issue("hutch-broker", hosts=(SERVICE,))
    broker = TLSHutchBroker(leaf=leaf, work_dir=tmp_path / "tls").start()
    ca = tmp_path / "ca.pem"
    ca.write_bytes(authority.pem)
    yield broker, ca
    broker.stop()


def hutchctl(*args, env):
    assert HUTCHCTL is not None, "hutchctl is not installed: run make bootstrap"
    return subprocess.run(
        [HUTCHCTL, *args], capture_output=True, text=True, timeout=60, check=False,
        env={"PATH": "/usr/bin:/bin", **env}, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def test_the_certificate_is_verified_for_the_service_name(tls_only) -> None:
    broker, ca = tls_only
    env = {"HUTCH_URL": broker.https_url, "HUTCH_CACERT": str(ca)}
    named = hutchctl("-q", "list_vhosts", env={**env, "HUTCH_SERVER_NAME": SERVICE})
    assert (named.returncode, named.stdout, named.stderr) == (0, "name\n/\n", "")
    wrong = hutchctl("-q", "list_vhosts", env={**env, "HUTCH_SERVER_NAME": "other.svc"})
    assert wrong.returncode == 69 and "certificate" in wrong.stderr.lower(), wrong.stderr
    unnamed = hutchctl("-q", "list_vhosts", env=env)
    assert unnamed.returncode == 69 and unnamed.stderr.count("\n") == 1, unnamed.stderr
