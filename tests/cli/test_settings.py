"""Where hutchctl connects and as whom: options, then environment, then a credentials file."""

from hutch_cli import arguments, settings
from hutch_cli.client import Endpoint
from hutch_cli.plans import Fail


def endpoint(argv, env=None, files=None):
    def read_text(path):
        if files is None or path not in files:
            raise FileNotFoundError(2, "No such file or directory")
        return files[path]

    return settings.endpoint(arguments.parse(argv), env or {}, read_text)


def test_defaults():
    assert endpoint(["status"]) == Endpoint("http://localhost:15672", "guest", "guest")


def test_options_beat_the_environment_which_beats_the_file():
    files = {"creds": "# the admin\nusername=admin\npassword=p=w\n"}
    env = {
        "HUTCH_URL": "https://b:15671/",
        "HUTCH_CREDENTIALS_FILE": "creds",
        "HUTCH_CACERT": "ca.pem",
    }
    assert endpoint(["status"], env, files) == Endpoint(
        "https://b:15671", "admin", "p=w", cacert="ca.pem"
    )
    assert endpoint(
        ["status", "--url", "http://x:1", "--username", "u", "--password", "pw", "-t", "5"],
        env,
        files,
    ) == Endpoint("http://x:1", "u", "pw", cacert="ca.pem", timeout=5.0)


def test_mistakes():
    assert endpoint(["status", "--credentials-file", "nope"]) == Fail(
        65, "cannot read credentials file nope: No such file or directory"
    )
    assert endpoint(["status", "--url", "localhost:15672"]).code == 64
    assert endpoint(["status", "-t", "soon"]).code == 64
