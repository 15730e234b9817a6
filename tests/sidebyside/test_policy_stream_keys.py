"""Policies for streams, operator-policy keys and a stream default queue type, side by side.

Observed on RabbitMQ 3.10.8 first: a policy's ``max-age`` must be a number and a unit such as
``7D`` (``0D``, ``7`` and ``1d`` are 400 ``<value> is not a valid max age``; values its check
cannot parse make it answer 500, which Hutch answers with the same 400), and
``stream-max-segment-size-bytes`` an integer of at least 0; neither is an operator-policy key.
Operator policies take neither the ``ha-*`` keys nor ``target-group-size`` (400, not
recognised); Hutch adds its own ``ring-size`` (RING-1). A refused policy changes nothing.
"""

import pika
import pytest

pytestmark = pytest.mark.rabbitmq


def _validation(detail):
    return {"error": "bad_request", "reason": f"Validation failed\n\n{detail}\n"}


def _erlang(target, text):
    """A detail as each broker writes it: 3.10.8 HTML-escapes a user policy's reason."""
    if target.expect("policy-error-escaping", hutch=False, rabbitmq=True):
        return text.replace("<<", "&lt;&lt;").replace(">>", "&gt;&gt;")
    return text


def _refused_and_not_stored(target, definition, *, operator=False):
    name = target.name("p")
    response = target.api.put_policy(name, "^nothing$", definition, operator=operator)
    kind = "operator-policies" if operator else "policies"
    stored = target.api.get(f"/{kind}/%2F/{name}").status
    return response.status, response.body, stored


MAX_AGE_REFUSED = [("0D", '<<"0D">>'), ("7", '<<"7">>'), ("1d", '<<"1d">>'), ("1Dx", '<<"1Dx">>')]
SEGMENT_REFUSED = [(-1, "-1"), ("1", '<<"1">>'), (1.5, "1.5"), (True, "true")]


@pytest.mark.parametrize(("value", "term"), MAX_AGE_REFUSED)
def test_a_malformed_max_age_is_refused(target, value, term):
    assert _refused_and_not_stored(target, {"max-age": value}) == (
        400,
        _validation(_erlang(target, f"{term} is not a valid max age")),
        404,
    )


@pytest.mark.parametrize(("value", "term"), [("x", '<<"x">>'), ("", "<<>>"), ("-1D", '<<"-1D">>'),
                                             (5, "5"), (True, "true")])  # fmt: skip
def test_a_max_age_that_crashes_rabbitmq_is_a_clear_400_on_hutch(target, value, term):
    status, body, stored = _refused_and_not_stored(target, {"max-age": value})
    assert (status, stored) == (target.expect("policy-max-age-crash", hutch=400, rabbitmq=500), 404)
    if target.is_hutch:
        assert body == _validation(f"{term} is not a valid max age")


def test_a_list_as_max_age(target):
    status, _, stored = _refused_and_not_stored(target, {"max-age": ["1D"]})
    assert (status, stored) == target.expect(
        "policy-max-age-crash", hutch=(400, 404), rabbitmq=(201, 200)
    )


@pytest.mark.parametrize(("value", "term"), SEGMENT_REFUSED)
def test_a_malformed_segment_size_is_refused(target, value, term):
    assert _refused_and_not_stored(target, {"stream-max-segment-size-bytes": value}) == (
        400,
        _validation(_erlang(target, f"{term} is not a valid segment size")),
        404,
    )


@pytest.mark.parametrize(
    "definition",
    [{"max-age": "1D"}, {"max-age": "07D"}, {"max-age": "1Y"}, {"max-age": "90m"},
     {"stream-max-segment-size-bytes": 0}, {"stream-max-segment-size-bytes": 1_000_000}],
)  # fmt: skip
def test_well_formed_stream_keys_are_accepted(target, definition):
    name = target.name("p")
    assert target.api.put_policy(name, "^nothing$", definition).status == 201
    assert target.api.get(f"/policies/%2F/{name}").body["definition"] == definition


def test_a_refused_policy_leaves_the_one_in_place(target):
    name = target.name("p")
    assert target.api.put_policy(name, "^nothing$", {"max-age": "1D"}).status == 201
    assert target.api.put_policy(name, "^nothing$", {"max-age": "0D"}).status == 400
    assert target.api.get(f"/policies/%2F/{name}").body["definition"] == {"max-age": "1D"}


@pytest.mark.parametrize(
    "definition",
    [{"ha-mode": "all"}, {"ha-mode": "exactly", "ha-params": 2}, {"ha-sync-mode": "automatic"},
     {"target-group-size": 3}, {"max-age": "1D"}, {"stream-max-segment-size-bytes": 10}],
)  # fmt: skip
def test_operator_policy_keys_rabbitmq_does_not_recognise(target, definition):
    listed = ",".join(f'{{<<"{key}">>,{_term(value)}}}' for key, value in definition.items())
    assert _refused_and_not_stored(target, definition, operator=True) == (
        400,
        _validation(f"[{listed}] are not recognised policy settings"),
        404,
    )


def _term(value):
    return f'<<"{value}">>' if isinstance(value, str) else str(value)


def test_operator_policy_keys_both_accept_and_hutchs_ring_size(target):
    name = target.name("ops")
    accepted = {
        "expires": 100_000,
        "message-ttl": 1000,
        "max-length": 10,
        "max-length-bytes": 1000,
        "delivery-limit": 3,
        "max-in-memory-length": 10,
        "max-in-memory-bytes": 100,
    }
    assert target.api.put_policy(name, "^nothing$", accepted, operator=True).status == 201
    ring = target.api.put_policy(name, "^nothing$", {"ring-size": 5}, operator=True).status
    assert ring == target.expect("ring-size", hutch=204, rabbitmq=400)


def test_a_stream_default_queue_type(target):
    """3.10.8 stores the key and declares classic queues; Hutch applies it as 4.x does
    (``rabbit_amqqueue:augment_declare_args``): a durable, shared, client-named queue declared
    without a type is a stream, any other stays classic, and a redeclare matches."""
    vhost = target.name("dqt")
    api = target.api
    assert api.put(f"/vhosts/{vhost}", {"default_queue_type": "stream"}).status == 201
    try:
        connection = target.connect(vhost=vhost)
        channel = connection.channel()
        channel.queue_declare("events", durable=True)
        channel.queue_declare("events", durable=True)  # the application's redeclare
        channel.queue_declare("transient", durable=False)
        channel.queue_declare("temporary", durable=True, auto_delete=True)
        generated = channel.queue_declare("", durable=True).method.queue
        assert api.put(f"/queues/{vhost}/via-http", {"durable": True}).status == 201
        kinds = {item["name"]: item["type"] for item in api.get(f"/queues/{vhost}").body}
        stream = target.expect("default-queue-type", hutch="stream", rabbitmq="classic")
        assert kinds == {
            "events": stream, "via-http": stream,
            "transient": "classic", "temporary": "classic", generated: "classic",
        }  # fmt: skip
        shown = api.get(f"/vhosts/{vhost}").body["default_queue_type"]
        assert shown == target.expect("default-queue-type", hutch="stream", rabbitmq="undefined")
        refused = None
        try:
            channel.queue_declare("with-ttl", durable=True, arguments={"x-message-ttl": 5})
        except pika.exceptions.ChannelClosedByBroker as closed:
            refused = closed.reply_text
        assert refused == target.expect(
            "default-queue-type",
            hutch="PRECONDITION_FAILED - invalid arg 'x-message-ttl' for queue 'with-ttl' in "
            f"vhost '{vhost}' of queue type rabbit_stream_queue",
            rabbitmq=None,
        )
    finally:
        assert api.delete(f"/vhosts/{vhost}").status == 204
