"""The management listener's pure parts: the cap from the fd limit, the refusal log's rate, and
the two config keys (a bad value is refused with the line named, as for every key)."""

import logging

import pytest
from aiohttp import http_exceptions
from hutch_broker import config
from hutch_broker.server import httpguard


@pytest.mark.parametrize(
    ("configured", "fd_limit", "cap"),
    [(None, 1024, 256), (None, 1_048_576, 1000), (None, 32, 16), (5, 1024, 5), (4000, 1024, 4000)],
)
def test_the_cap_is_a_quarter_of_the_fd_limit_unless_configured(configured, fd_limit, cap):
    assert httpguard.connection_cap(configured, fd_limit) == cap


def test_refusals_are_logged_once_a_minute_per_reason_with_the_count_left_out():
    now = [0.0]
    limiter = httpguard.RateLimitedLog(every_s=60.0, clock=lambda: now[0])
    assert limiter.allow("cap") == 0
    assert [limiter.allow("cap") for _ in range(500)] == [None] * 500
    assert limiter.allow("parse:LineTooLong") == 0  # another reason has its own line
    now[0] = 61.0
    assert limiter.allow("cap") == 500
    assert limiter.allow("cap") is None


def test_a_parse_error_record_becomes_one_warning_line():
    limiter = httpguard.RateLimitedLog(clock=lambda: 0.0)
    one_line = httpguard.OneLineParseErrors(limiter)
    error = http_exceptions.LineTooLong(b"request line", "8190", "9000")

    def record():
        return logging.LogRecord(
            "x",
            logging.ERROR,
            __file__,
            1,
            "Error handling request from %s",
            ("10.0.0.1",),
            (type(error), error, None),
        )

    first = record()
    assert one_line.filter(first)
    assert first.levelno == logging.WARNING and first.exc_info is None
    assert first.getMessage().startswith("refused an HTTP request from 10.0.0.1 (400, LineTooLong")
    assert not one_line.filter(record())
    other = logging.LogRecord("x", logging.ERROR, __file__, 1, "Unhandled", (), None)
    assert one_line.filter(other) and other.levelno == logging.ERROR  # left as it is


def test_config_keys():
    parsed = config.parse(
        "management.tcp.max_connections = 50\nmanagement.tcp.request_timeout = 2500\n"
    )
    assert (parsed.http_max_connections, parsed.http_request_timeout_s) == (50, 2.5)
    assert config.BrokerConfig().http_max_connections is None
    for bad in ("management.tcp.max_connections = 0", "management.tcp.request_timeout = soon"):
        with pytest.raises(config.ConfigError, match="line 1"):
            config.parse(bad)
