"""The listing the stream source plans several streams with, in memory: the URL it builds and
what the broker's name filter makes of it.

The plan for several streams asks `GET /api/queues/{vhost}` for exactly its streams, with the
listing's `name` + `use_regex` filter on one page: before, it listed every queue of the vhost,
5,000 rows on a shared broker to plan 3 streams. The filter is held here to hutch-broker's own
matcher (`listing.name_matcher`, case-insensitive as RabbitMQ's): each name is matched, and no
queue that differs from one in case, by a character a regex would read otherwise, or by a
prefix or a suffix. The same listing runs on real brokers in test_streambounds_broker.py.
"""

import http.client
import pickle
import re
import urllib.parse

import pytest
from hutch_broker.admin import listing
from hutch_spark import streambounds, streamhttp, streamoptions

NAMES = [
    "orders-0",
    "a.b",
    "a+b*c?",
    "(x)|[y]{2}^$",
    "back\\slash",
    "tab\there",
    "with space",
    "dir/sub/leaf",
    "Straße-流",
    "#&~-",
]
DECOYS = [
    "ORDERS-0",
    "orders-00",
    "xorders-0",
    "orders",
    "aXb",
    "a.bc",
    "aab*c?",
    "a+b*c",
    "x|[y]{2}^$",
    "back/slash",
    "STRASSE-流",
    "straße-流",
    "dir/sub",
    "with  space",
    "",
    "orders-0\n",  # `$` matched before a final newline: the filter's end is `\Z` now
    "a+b*c?\n",
]


def query(names: list[str], page: int = 1) -> dict[str, str]:
    parsed = urllib.parse.parse_qs(streambounds.listing_query(names, page)[1:], strict_parsing=True)
    assert all(len(values) == 1 for values in parsed.values())
    return {key: values[0] for key, values in parsed.items()}


def test_the_listing_asks_one_page_of_exactly_its_names() -> None:
    assert streambounds.listing_query(["s-1", "a.b/c"]) == (
        "?columns=name%2Ctype%2Cfirst_offset%2Cnext_offset"
        "&name=%5E%28%3F-i%3As%5C-1%7Ca%5C.b%2Fc%29%5CZ&use_regex=true&page=1&page_size=2"
    )
    asked = query(NAMES)
    assert asked["columns"] == streambounds.LISTED_COLUMNS
    assert (asked["use_regex"], asked["page"], asked["page_size"]) == ("true", "1", "10")


def test_the_brokers_filter_lets_through_the_names_and_nothing_else() -> None:
    paging = listing.parse_query(query(NAMES)).paging
    assert paging is not None and paging.use_regex
    matcher = listing.name_matcher(paging)
    assert [name for name in NAMES if matcher.search(name)] == NAMES
    assert [name for name in DECOYS if matcher.search(name)] == []
    rows = [{"name": name} for name in DECOYS + NAMES]
    page = listing.page(rows, paging, len(rows))
    assert page["items"] == [{"name": name} for name in NAMES]
    assert page["page_count"] == 1


@pytest.mark.parametrize("name", NAMES)
def test_each_name_alone_is_matched_exactly(name: str) -> None:
    paging = listing.parse_query(query([name])).paging
    assert paging is not None
    matcher = listing.name_matcher(paging)
    assert matcher.search(name)
    assert not any(matcher.search(other) for other in NAMES + DECOYS if other != name)


def test_the_filter_ends_at_the_very_end_of_a_name_in_pythons_re_too() -> None:
    """hutch-broker's matcher takes Python's syntax and meaning; `re` itself agrees, so a name
    with a newline more than a stream's is no match however the filter is searched."""
    pattern = re.compile("(?i)" + streambounds.name_filter(NAMES))
    assert [name for name in NAMES if pattern.search(name)] == NAMES
    for name in NAMES:
        assert pattern.search(name + "\n") is None, repr(name)
        assert pattern.search(name + "\r\n") is None, repr(name)


def test_many_names_go_in_groups_within_a_page_and_a_request_line() -> None:
    names = [f"partition-{n:04d}" for n in range(1200)]
    groups = streambounds.name_groups(names)
    assert [name for group in groups for name in group] == names
    assert all(len(group) <= streambounds.MAX_PAGE_SIZE for group in groups)
    for group in groups:
        line = f"GET /api/queues/%2F{streambounds.listing_query(group)} HTTP/1.1"
        assert len(line) < 8190 - 100, len(line)  # aiohttp's request line limit
    assert streambounds.name_groups(["a", "b", "c"]) == [("a", "b", "c")]
    assert len(streambounds.name_groups([f"q{n}" for n in range(501)])) == 2  # the page's 500
    longest = "+" * 255  # a queue name's most bytes; escaped and encoded, 1,530 characters
    assert [len(group) for group in streambounds.name_groups([longest] * 5)] == [2, 2, 1]


def test_a_session_pickles_with_its_settings_only() -> None:
    """A reader's kept connection never travels with it: not the socket, and not a password
    the environment gave (the settings carry what their URIs hold, as before)."""
    settings = streamoptions.parse_stream_options({"streams": "a,b", "managementUri": "http://h:1"})
    env = {"HUTCH_AMQP_USERNAME": "job", "HUTCH_AMQP_PASSWORD": "secret-pw"}
    session = streamhttp.Session(settings, env)
    assert session.user == "job"
    session._connection = http.client.HTTPConnection("h", 1)  # never connected
    pickled = pickle.dumps(session)
    token = session._headers["Authorization"].split()[1].encode()
    assert b"secret-pw" not in pickled and token not in pickled
    restored = pickle.loads(pickled)  # noqa: S301 - made here
    assert restored._connection is None
    assert (
        restored._headers["Authorization"] == streamhttp.Session(settings)._headers["Authorization"]
    )  # as a session made where it is unpickled
