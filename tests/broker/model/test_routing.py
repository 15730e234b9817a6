"""Pure routing logic: topic trie, headers matching, e2e graphs, alternate exchanges."""

import pytest
from hutch_broker.model.exchanges import headers_match
from hutch_broker.model.messages import Message
from hutch_broker.model.vhosts import VirtualHost
from hutch_broker.protocol import errors


def names(queues):
    return sorted(q.name for q in queues)


def msg(rk: str = "") -> Message:
    return Message("x", rk, b"\x00\x00", b"body", persistent=False)


@pytest.fixture
def vhost():
    return VirtualHost("/")


@pytest.mark.parametrize(
    ("pattern", "key", "matches"),
    [
        ("a.b.c", "a.b.c", True),
        ("a.*.c", "a.b.c", True),
        ("a.*.c", "a.c", False),
        ("a.#", "a", True),
        ("a.#", "a.b.c.d", True),
        ("#", "", True),
        ("#", "anything.at.all", True),
        ("#.c", "c", True),
        ("#.c", "a.b.c", True),
        ("a.#.c", "a.c", True),
        ("a.#.c", "a.x.y.c", True),
        ("a.#.c", "a.x.y.d", False),
        ("*", "", False),  # the empty key is zero words, as in RabbitMQ 3.10.8
        ("*", "a.b", False),
        ("*.*", "a", False),
        ("#.#", "a.b", True),
        ("", "", True),
        ("", "a", False),
    ],
)
def test_topic_matching(vhost, pattern, key, matches):
    exchange, _ = vhost.declare_exchange("t", "topic")
    queue, _ = vhost.declare_queue("q")
    vhost.bind("t", queue, pattern)
    assert names(vhost.route(exchange, [key], msg(key))) == (["q"] if matches else [])


def test_topic_unbind_prunes_and_invalidates_cache(vhost):
    exchange, _ = vhost.declare_exchange("t", "topic")
    queue, _ = vhost.declare_queue("q")
    vhost.bind("t", queue, "a.*")
    assert names(vhost.route(exchange, ["a.b"], msg())) == ["q"]
    vhost.unbind("t", queue, "a.*")
    assert names(vhost.route(exchange, ["a.b"], msg())) == []


@pytest.mark.parametrize(
    ("args", "headers", "expected"),
    [
        ({"x-match": "all", "a": 1, "b": "x"}, {"a": 1, "b": "x"}, True),
        ({"x-match": "all", "a": 1, "b": "x"}, {"a": 1}, False),
        ({"x-match": "any", "a": 1, "b": "x"}, {"a": 1}, True),
        ({"x-match": "any", "a": 1}, {"a": 2}, False),
        ({"a": None}, {"a": "whatever"}, True),  # void: present
        ({"a": 1}, {"a": 1.0}, True),  # numbers compare by value
        ({"x-match": "all", "x-k": 1}, {}, True),  # x- keys ignored without -with-x
        ({"x-match": "all-with-x", "x-k": 1}, {}, False),
        ({"x-match": "any-with-x", "x-k": 1}, {"x-k": 1}, True),
        ({"a": b"x"}, {"a": "x"}, True),
    ],
)
def test_headers_matching(args, headers, expected):
    assert headers_match(args, headers) is expected


def test_bad_x_match_is_406(vhost):
    vhost.declare_exchange("h", "headers")
    queue, _ = vhost.declare_queue("q")
    with pytest.raises(errors.SoftError) as info:
        vhost.bind("h", queue, "", {"x-match": "foo"})
    assert info.value.reply_text == (
        'PRECONDITION_FAILED - Invalid x-match field value <<"foo">>; expected all, any, '
        "all-with-x, or any-with-x"
    )


def test_e2e_cycle_terminates_and_dedups(vhost):
    x1, _ = vhost.declare_exchange("x1", "fanout")
    vhost.declare_exchange("x2", "fanout")
    vhost.bind("x1", vhost.exchanges["x2"], "")
    vhost.bind("x2", x1, "")
    queue, _ = vhost.declare_queue("q")
    vhost.bind("x1", queue, "")
    vhost.bind("x2", queue, "")
    assert names(vhost.route(x1, [""], msg())) == ["q"]


def test_alternate_exchange_chain_and_cycle(vhost):
    x, _ = vhost.declare_exchange("x", "direct", arguments={"alternate-exchange": "u"})
    vhost.declare_exchange("u", "direct", arguments={"alternate-exchange": "v"})
    vhost.declare_exchange("v", "direct", arguments={"alternate-exchange": "x"})
    assert vhost.route(x, ["k"], msg("k")) == []  # x -> u -> v -> x ends
    queue, _ = vhost.declare_queue("q")
    vhost.bind("v", queue, "k")
    assert names(vhost.route(x, ["k"], msg("k"))) == ["q"]


def test_alternate_exchange_only_when_unrouted(vhost):
    x, _ = vhost.declare_exchange("x", "direct", arguments={"alternate-exchange": "ae"})
    vhost.declare_exchange("ae", "fanout")
    routed, _ = vhost.declare_queue("routed")
    unrouted, _ = vhost.declare_queue("unrouted")
    vhost.bind("x", routed, "k")
    vhost.bind("ae", unrouted, "")
    assert names(vhost.route(x, ["k"], msg("k"))) == ["routed"]
    assert names(vhost.route(x, ["other"], msg("other"))) == ["unrouted"]


def test_missing_alternate_exchange_is_skipped(vhost):
    x, _ = vhost.declare_exchange("x", "direct", arguments={"alternate-exchange": "missing"})
    assert vhost.route(x, ["k"], msg("k")) == []


def test_default_exchange_routes_by_queue_name(vhost):
    vhost.declare_queue("q")
    assert names(vhost.route(vhost.default_exchange, ["q"], msg("q"))) == ["q"]
    assert vhost.route(vhost.default_exchange, ["nope"], msg("nope")) == []


def test_rebinding_is_a_no_op(vhost):
    vhost.declare_exchange("x", "direct")
    queue, _ = vhost.declare_queue("q")
    first = vhost.bind("x", queue, "k", {"a": 1})
    assert vhost.bind("x", queue, "k", {"a": 1}) is first
    assert len(vhost.bindings()) == 1


def test_auto_delete_exchange_goes_with_last_binding(vhost):
    vhost.declare_exchange("ad", "direct", auto_delete=True)
    queue, _ = vhost.declare_queue("q")
    vhost.bind("ad", queue, "k")
    vhost.unbind("ad", queue, "k")
    assert "ad" not in vhost.exchanges
