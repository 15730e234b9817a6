"""The noisy cases build their objects in one pipelined stream: in order, and loud on a refusal.

Why: ``rawamqp.pipelined`` sends thousands of ``nowait`` declares and binds without reading,
then one method with a reply; the cases' set-up (``noisy_cases.declare_all``) trusts that the
reply means every method before it was served, and that a refused method is not passed over.
Here the broker is the other end of a socket pair, so the test sees exactly what was sent.
"""

import socket
import threading

import pytest
from hutch_testing import rawamqp
from pamqp import commands, frame


def _serve(sock: socket.socket, received: list[object], reply: object) -> None:
    """Read methods until the passive declare, then answer it with ``reply``."""
    while True:
        method = rawamqp.read_frame(sock)
        received.append(method)
        if isinstance(method, commands.Queue.Declare) and method.passive:
            sock.sendall(frame.marshal(reply, 1))
            return


def _run(reply: object, count: int) -> tuple[list[object], object]:
    client, server = socket.socketpair()
    received: list[object] = []
    broker = threading.Thread(target=_serve, args=(server, received, reply))
    broker.start()
    methods = [commands.Queue.Declare(queue=f"q{index}", nowait=True) for index in range(count)]
    sync = commands.Queue.Declare(queue=f"q{count - 1}", passive=True)
    try:
        answer = rawamqp.pipelined(client, methods, sync, commands.Queue.DeclareOk)
    finally:
        broker.join(30)
        client.close()
        server.close()
    return received, answer


def test_every_method_is_sent_in_order_before_the_sync_and_its_answer_is_returned():
    received, answer = _run(commands.Queue.DeclareOk("q4999", 0, 0), 5000)  # three batches
    assert [method.queue for method in received] == [f"q{i}" for i in range(5000)] + ["q4999"]
    assert [method.passive for method in received].count(True) == 1
    assert isinstance(answer, commands.Queue.DeclareOk)


def test_a_refused_method_is_an_error_not_a_silent_skip():
    refusal = commands.Channel.Close(404, "NOT_FOUND - no queue 'q9'", 50, 10)
    with pytest.raises(AssertionError, match=r"refused a pipelined method.*NOT_FOUND"):
        _run(refusal, 10)
