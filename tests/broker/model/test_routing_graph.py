"""model/routing.py on hand-built graphs: no vhost, no declare, no clock.

The graph is a plain dataclass of exchanges and queues wired with ``Exchange.add_binding``, so
these tests pin the routing rules themselves; tests/broker/model/test_routing.py covers the
same rules through ``VirtualHost.route``.
"""

from dataclasses import dataclass, field

from hutch_broker.model import routing
from hutch_broker.model.exchanges import Binding, Exchange, make_exchange
from hutch_broker.model.messages import Message
from hutch_broker.model.queues import Queue


@dataclass
class Graph:
    exchanges: dict[str, Exchange] = field(default_factory=dict)
    queues: dict[str, Queue] = field(default_factory=dict)
    default_exchange: Exchange = field(default_factory=lambda: make_exchange("", "direct"))

    def exchange(self, name, kind, **arguments):
        self.exchanges[name] = make_exchange(name, kind, arguments=arguments)
        return self.exchanges[name]

    def queue(self, name):
        self.queues[name] = Queue(name)
        return self.queues[name]

    def bind(self, source, destination, key=""):
        source.add_binding(Binding(source, destination, key, {}))


def msg(key=""):
    return Message("x", key, b"\x00\x00", b"body", persistent=False)


def names(queues):
    return [queue.name for queue in queues]


def test_every_key_is_matched_and_each_queue_is_reached_once():
    graph = Graph()
    x = graph.exchange("x", "direct")
    graph.bind(x, graph.queue("qa"), "a")
    graph.bind(x, graph.queue("qb"), "b")
    found = routing.route(graph, x, ["a", "b", "a"], msg("a"))
    assert sorted(names(found)) == ["qa", "qb"]


def test_keys_given_once_as_an_iterator_reach_every_exchange_on_the_path():
    graph = Graph()
    x, y = graph.exchange("x", "direct"), graph.exchange("y", "direct")
    graph.bind(x, y, "k")
    graph.bind(y, graph.queue("q"), "k")
    assert names(routing.route(graph, x, iter(["k"]), msg("k"))) == ["q"]


def test_the_alternate_exchange_gets_the_message_only_when_no_key_matched():
    graph = Graph()
    x = graph.exchange("x", "direct", **{"alternate-exchange": "ae"})
    graph.bind(x, graph.queue("routed"), "a")
    graph.bind(graph.exchange("ae", "fanout"), graph.queue("unrouted"))
    assert names(routing.route(graph, x, ["a", "nothing"], msg("a"))) == ["routed"]
    assert names(routing.route(graph, x, ["nothing"], msg("nothing"))) == ["unrouted"]


def test_alternate_exchanges_that_loop_back_end_without_a_queue():
    graph = Graph()
    x = graph.exchange("x", "direct", **{"alternate-exchange": "y"})
    graph.exchange("y", "direct", **{"alternate-exchange": "x"})
    assert routing.route(graph, x, ["k"], msg("k")) == []


def test_the_default_exchange_routes_to_the_queues_its_keys_name():
    graph = Graph()
    graph.queue("a")
    graph.queue("b")
    found = routing.route(graph, graph.default_exchange, ["b", "missing", "a", "b"], msg("b"))
    assert names(found) == ["b", "a"]


def test_alternate_of_skips_a_missing_or_visited_alternate():
    graph = Graph()
    x = graph.exchange("x", "direct", **{"alternate-exchange": "ae"})
    assert routing.alternate_of(graph.exchanges, x, set()) is None  # "ae" is not declared
    ae = graph.exchange("ae", "fanout")
    assert routing.alternate_of(graph.exchanges, x, set()) is ae
    assert routing.alternate_of(graph.exchanges, x, {id(ae)}) is None
    assert routing.alternate_of(graph.exchanges, ae, set()) is None  # it has none


def test_routing_leaves_the_graph_as_it_was():
    graph = Graph()
    x = graph.exchange("x", "topic", **{"alternate-exchange": "ae"})
    graph.bind(x, graph.queue("q"), "a.*")
    graph.exchange("ae", "fanout")
    before = (dict(graph.exchanges), dict(graph.queues), dict(x.bindings))
    routing.route(graph, x, ["a.b", "c"], msg("a.b"))
    assert (dict(graph.exchanges), dict(graph.queues), dict(x.bindings)) == before
