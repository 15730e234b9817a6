"""A method frame's arguments must be exactly its fields: a byte more is 501 "cannot decode".

Why: pamqp, which decodes every method but basic.publish and the acks, reads the fields and
ignores what follows them; RabbitMQ 3.10.8 matches a method's arguments exactly and closes the
connection with 501 (tests/sidebyside/test_client_trust.py compares the two brokers over a raw
socket). ``codec.arguments_size`` counts the bytes the fields take; these tests hold it to
every method pamqp builds, with bits packed eight to an octet and tables of every shape.
"""

from __future__ import annotations

import warnings

import pytest
from hutch_broker.protocol import codec, errors
from pamqp import commands, frame


# Every method, with fields set where pamqp needs them, and with tables and bit runs filled in.
def _defaults() -> list:
    """The methods pamqp builds without arguments."""
    built = []
    for cls in commands.INDEX_MAPPING.values():
        with warnings.catch_warnings():
            warnings.simplefilter("error", DeprecationWarning)
            try:
                method = cls()
                frame.marshal(method, 1)
            except TypeError:  # fields without defaults: given below where they matter
                continue
            except DeprecationWarning:  # basic.recover-async: not 0-9-1
                continue
        built.append(method)
    return built


METHODS = [
    *_defaults(),
    commands.Connection.Close(320, "bye", 0, 0),
    commands.Channel.Flow(active=True),
    commands.Channel.Close(200, "ok", 60, 40),
    commands.Queue.Declare(
        queue="q",
        passive=True,
        durable=True,
        exclusive=True,
        auto_delete=True,
        nowait=True,
        arguments={"x-max-length": 5, "nested": {"a": [1, "two", 3.5]}},
    ),
    commands.Exchange.Declare(
        exchange="e",
        exchange_type="topic",
        passive=True,
        durable=True,
        auto_delete=True,
        internal=True,
        nowait=True,
        arguments={"alternate-exchange": "ae"},
    ),
    commands.Basic.Consume(
        queue="q",
        consumer_tag="c",
        no_local=True,
        no_ack=True,
        exclusive=True,
        nowait=True,
        arguments={"x-priority": 3},
    ),
    commands.Basic.Reject(delivery_tag=2**62, requeue=True),
    commands.Basic.Nack(delivery_tag=7, multiple=True, requeue=False),
    commands.Basic.Publish(exchange="amq.topic", routing_key="a.b", mandatory=True),
]


def arguments_of(method) -> bytes:
    marshalled = frame.marshal(method, 1)
    return marshalled[11:-1]  # no frame header, class and method ids or end octet


@pytest.mark.parametrize("method", METHODS, ids=lambda method: method.name)
def test_the_fields_take_every_byte_of_what_pamqp_writes(method):
    arguments = arguments_of(method)
    assert codec.arguments_size(method, arguments) == len(arguments)
    decoded = codec.decode_method(method.index.to_bytes(4, "big") + arguments)
    assert type(decoded) is type(method)


@pytest.mark.parametrize("method", METHODS, ids=lambda method: method.name)
@pytest.mark.parametrize("extra", [b"\x00", b"!", b"\xce" * 9])
def test_bytes_after_the_last_field_are_501(method, extra):
    arguments = arguments_of(method) + extra
    with pytest.raises(errors.HardError) as caught:
        codec.decode_method(method.index.to_bytes(4, "big") + arguments)
    assert caught.value.reply_code == 501
    assert caught.value.reply_text == (
        f"FRAME_ERROR - cannot decode {codec.erlang_binary(arguments, limit=64)}"
    )
    assert (caught.value.class_id, caught.value.method_id) == (
        method.index >> 16,
        method.index & 0xFFFF,
    )
