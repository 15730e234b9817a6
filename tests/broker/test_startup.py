"""Issue "Broker trust", item 12: a broker that refuses to start says why in one line.

``main`` runs in-process for the refusals that happen before anything listens; the port-in-use
case binds a real socket first.
"""

import socket
from pathlib import Path

import pytest
from hutch_broker import __main__ as entry
from hutch_broker import config as config_mod


def test_item_12_max_message_size_above_512_mib_is_refused_with_its_line():
    text = "heartbeat = 30\nmax_message_size = 536870913\n"
    with pytest.raises(config_mod.ConfigError) as info:
        config_mod.parse(text)
    assert str(info.value) == (
        "line 2 (max_message_size): must be between 1 and 536870912 (512 MiB): '536870913'"
    )
    assert config_mod.parse("max_message_size = 512MiB").max_message_size == 512 * 1024**2


def run(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    argv = ["--amqp-port", "0", "--http-port", "0", "--log-level", "CRITICAL", *args]
    if "--data-dir" not in args:
        argv += ["--data-dir", str(tmp_path / "data")]
    code = entry.main(argv)
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    return code, captured.err


def test_item_12_bad_config_is_one_line(tmp_path, capsys):
    config = tmp_path / "broker.conf"
    config.write_text("max_message_size = 1GiB\n")
    code, err = run(tmp_path, capsys, "--config", str(config))
    assert code == 2
    assert err == (
        f"hutch-broker: {config}: line 1 (max_message_size): "
        "must be between 1 and 536870912 (512 MiB): '1GiB'\n"
    )


def test_item_12_missing_config_is_one_line(tmp_path, capsys):
    code, err = run(tmp_path, capsys, "--config", str(tmp_path / "nowhere.conf"))
    assert code == 2
    assert err.startswith(f"hutch-broker: {tmp_path / 'nowhere.conf'}: ")
    assert err.count("\n") == 1


def test_item_12_data_dir_that_is_a_file_is_one_line(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("")
    code, err = run(tmp_path, capsys, "--data-dir", str(blocker / "data"))
    assert code == 1
    assert err == f"hutch-broker: Not a directory: {blocker / 'data'}\n"


def test_item_12_refused_recovery_is_one_line(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    (data / "definitions.json").write_text("[1, 2")
    code, err = run(tmp_path, capsys)
    assert code == 1
    assert err.startswith(f"hutch-broker: {data / 'definitions.json'}: not valid JSON")
    assert err.count("\n") == 1


@pytest.mark.broker  # starts processes (hutch_testing.levels)
def test_item_12_port_in_use_is_one_line(tmp_path, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, err = run(tmp_path, capsys, "--amqp-port", str(port))
    assert code == 1
    assert err.startswith("hutch-broker: [Errno 98] error while attempting to bind")
    assert "address already in use" in err
    assert err.count("\n") == 1
