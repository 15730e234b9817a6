"""The driver-side queue consumer: a daemon I/O thread that owns the AMQP connection.

Why a thread: Spark calls the stream reader synchronously, and between two calls the driver may
spend minutes running a batch. The connection must keep answering heartbeats meanwhile, and
deliveries should keep filling the buffer up to the prefetch window. So a pika
`SelectConnection` lives in its own thread; the runner's thread talks to it only through a
lock-protected buffer and `add_callback_threadsafe` (pika objects are not thread-safe).

Rules (docs/contracts/spark.md#ack-protocol):
- `basic.qos(prefetch)` bounds the buffer; it is the back-pressure.
- Each channel is an *epoch*. When it closes, buffered deliveries are dropped (the broker
  re-queues them) and acks for the old epoch are never sent: a tag from another channel gets
  406 PRECONDITION_FAILED and closes the channel.
- Reconnects back off 1, 2, 4 ... 30 s. After `give_up_after_s` of failures, on an
  authentication failure, a missing queue (404), an access refusal (403: no read permission,
  or an exclusive consumer elsewhere), another connection's exclusive queue (405) or a broker
  `basic.cancel` (queue deleted), the consumer stops and the next call raises
  HutchConnectionError naming the queue; failures.py words each case, and a failed connect.
  A broker certificate that fails verification is final at the first attempt too: waiting out
  the budget would only delay the same error (failures.is_final).
- Throughput: pika's per-frame dispatch was the source's bottleneck, so `_FastConnection` reads
  64 KiB at a time and, once consuming, decodes basic.deliver and its content frames on our
  channel itself (a delivery whose frames are all buffered in one call, its properties with
  properties.py); every other frame still goes through pika (same callbacks, same semantics).
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import logging
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import pika
import pika.exceptions
import pika.frame
import pika.spec
from pika.adapters.select_connection import SelectConnection

from hutch_spark import connections, failures, properties
from hutch_spark.errors import HutchConnectionError
from hutch_spark.records import Delivery

log = logging.getLogger(__name__)

_FRAME_HEADER = struct.Struct(">BHL")  # type, channel, size; then the payload and 0xCE
_DELIVER_HEAD = struct.Struct(">IB")  # method id, consumer-tag length
_DELIVER_TAIL = struct.Struct(">QB")  # delivery-tag, redelivered bit
_CONTENT_HEADER = struct.Struct(">HHQ")  # class id, weight, body size
_BASIC_DELIVER = pika.spec.Basic.Deliver.INDEX
_RECV_BYTES = 65536  # pika reads 4096 bytes per recv; a delivery is ~3 frames of ~100 bytes


class _DeliverySink:
    """Where `_FastConnection` hands complete deliveries of one channel, skipping pika's
    per-frame objects, callbacks and content assembler (the I/O thread's main cost)."""

    __slots__ = ("channel_number", "on_delivery")

    def __init__(
        self, channel_number: int, on_delivery: Callable[[int, bool, str, str, Any, bytes], None]
    ) -> None:
        self.channel_number = channel_number
        self.on_delivery = on_delivery


class _FastConnection(SelectConnection):  # type: ignore[misc]  # pika: Any to mypy
    """A SelectConnection that reads frames in bulk and decodes basic.deliver content itself.

    pika copies its whole frame buffer after every frame (so it reads 4096 bytes at a time) and
    builds several objects and callback look-ups per frame. Here the buffer is walked by offset,
    and while `sink` is set, basic.deliver and its content frames on the sink's channel are
    decoded with struct and passed on as one call; every other frame (heartbeats, channel and
    connection methods, basic.cancel, other channels) still goes through pika unchanged.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.sink: _DeliverySink | None = None
        # The delivery being assembled: [tag, redelivered, exchange, routing key, properties,
        # body size, received body size, body parts].
        self._pending: list[Any] | None = None
        super().__init__(*args, **kwargs)

    def _proto_connection_made(self, transport: Any) -> None:
        if hasattr(transport, "_MAX_RECV_BYTES"):  # an instance attribute: pika's class keeps 4096
            transport._MAX_RECV_BYTES = _RECV_BYTES
        super()._proto_connection_made(transport)

    def _on_data_available(self, data_in: bytes) -> None:
        held: bytes = getattr(self, "_frame_buffer", b"")  # pika's attribute, untyped
        buf = held + data_in if held else data_in
        size = len(buf)
        offset = 0
        try:
            while offset < size:
                if size - offset < 7 or buf.startswith(b"AMQP", offset):
                    consumed, value = pika.frame.decode_frame(buf[offset:])
                    if value is None:
                        break
                    offset += consumed
                    self.bytes_received += consumed
                    self._process_frame(value)
                    continue
                frame_type, channel_number, frame_size = _FRAME_HEADER.unpack_from(buf, offset)
                end = offset + 8 + frame_size
                if end > size:
                    break
                start = offset
                offset = end
                self.bytes_received += end - start
                sink = self.sink
                if (
                    sink is not None
                    and channel_number == sink.channel_number
                    and buf[end - 1] == pika.spec.FRAME_END
                    and (
                        self._pending is not None
                        or (
                            frame_type == pika.spec.FRAME_METHOD
                            and _DELIVER_HEAD.unpack_from(buf, start + 7)[0] == _BASIC_DELIVER
                        )
                    )
                ):
                    if self._pending is None:
                        whole_end = self._whole_delivery(sink, buf, start, end, size)
                        if whole_end:
                            self.bytes_received += whole_end - end
                            offset = whole_end
                            continue
                    self._fast_frame(sink, frame_type, buf, start + 7, end - 1)
                    continue
                _consumed, value = pika.frame.decode_frame(buf[start:end])
                if value is None:  # pragma: no cover - a complete frame always decodes
                    raise pika.exceptions.InvalidFrameError("undecodable frame")
                self._process_frame(value)
        finally:
            self._frame_buffer = buf[offset:] if offset else buf

    def _whole_delivery(
        self, sink: _DeliverySink, buf: bytes, start: int, method_end: int, size: int
    ) -> int:
        """Decodes a delivery whose method, header and single body frame are all in `buf`
        (the common case: one call per message instead of three); returns the offset after
        it, or 0 to let `_fast_frame` assemble it frame by frame."""
        if method_end + 7 > size:
            return 0
        header_type, header_channel, header_size = _FRAME_HEADER.unpack_from(buf, method_end)
        header_end = method_end + 8 + header_size
        if header_type != pika.spec.FRAME_HEADER or header_channel != sink.channel_number:
            return 0
        if header_end > size or buf[header_end - 1] != pika.spec.FRAME_END:
            return 0
        body_size = _CONTENT_HEADER.unpack_from(buf, method_end + 7)[2]
        if body_size == 0:
            body = b""
            end = header_end
        else:
            if header_end + 7 > size:
                return 0
            body_type, body_channel, frame_size = _FRAME_HEADER.unpack_from(buf, header_end)
            end = header_end + 8 + frame_size
            if (
                body_type != pika.spec.FRAME_BODY
                or body_channel != sink.channel_number
                or frame_size != body_size
                or end > size
                or buf[end - 1] != pika.spec.FRAME_END
            ):
                return 0
            body = buf[header_end + 7 : end - 1]
        pos = start + 7
        tag_length = buf[pos + 4]
        pos += 5 + tag_length
        delivery_tag, bits = _DELIVER_TAIL.unpack_from(buf, pos)
        pos += 9
        length = buf[pos]
        exchange = buf[pos + 1 : pos + 1 + length].decode("utf-8")
        pos += 1 + length
        length = buf[pos]
        routing_key = buf[pos + 1 : pos + 1 + length].decode("utf-8")
        props = properties.decode(buf, method_end + 19)
        sink.on_delivery(delivery_tag, bool(bits & 1), exchange, routing_key, props, body)
        return int(end)

    def _fast_frame(
        self, sink: _DeliverySink, frame_type: int, buf: bytes, start: int, stop: int
    ) -> None:
        pending = self._pending
        if pending is None:  # basic.deliver: consumer tag, delivery tag, redelivered, names
            _method, tag_length = _DELIVER_HEAD.unpack_from(buf, start)
            pos = start + 5 + tag_length
            delivery_tag, bits = _DELIVER_TAIL.unpack_from(buf, pos)
            pos += 9
            length = buf[pos]
            exchange = buf[pos + 1 : pos + 1 + length].decode("utf-8")
            pos += 1 + length
            length = buf[pos]
            routing_key = buf[pos + 1 : pos + 1 + length].decode("utf-8")
            self._pending = [delivery_tag, bool(bits & 1), exchange, routing_key, None, 0, 0, []]
            return
        if pending[4] is None:
            if frame_type != pika.spec.FRAME_HEADER:
                raise pika.exceptions.UnexpectedFrameError(frame_type)
            pending[4] = properties.decode(buf, start + 12)
            pending[5] = _CONTENT_HEADER.unpack_from(buf, start)[2]
        else:
            if frame_type != pika.spec.FRAME_BODY:
                raise pika.exceptions.UnexpectedFrameError(frame_type)
            pending[7].append(buf[start:stop])
            pending[6] += stop - start
        if pending[6] >= pending[5]:
            self._pending = None
            parts = pending[7]
            body = parts[0] if len(parts) == 1 else b"".join(parts)
            sink.on_delivery(pending[0], pending[1], pending[2], pending[3], pending[4], body)


class QueueConsumer:
    """Consumes one queue with manual acks into a bounded buffer; see the module docstring."""

    def __init__(
        self,
        *,
        parameters: pika.ConnectionParameters,
        queue: str,
        prefetch: int,
        exclusive: bool = False,
        consumer_arguments: dict[str, Any] | None = None,
        give_up_after_s: float = 300.0,
        max_backoff_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.queue = queue
        self._parameters = parameters
        self._endpoint = connections.endpoint(parameters)
        self._prefetch = prefetch
        self._exclusive = exclusive
        self._arguments = consumer_arguments or {}
        self._give_up_after_s = give_up_after_s
        self._max_backoff_s = max_backoff_s
        self._clock = clock
        # Shared with the runner's thread, guarded by _cond.
        self._cond = threading.Condition()
        self._buffer: collections.deque[Delivery] = collections.deque()
        self._runner_waiting = False
        self._live_epoch: int | None = None
        self._fatal: HutchConnectionError | None = None
        self._connection: SelectConnection | None = None
        self._stopping = threading.Event()
        self._consuming = threading.Event()
        self._thread: threading.Thread | None = None
        # Touched by the I/O thread only.
        self._epochs = 0
        self._channel: Any = None
        self._acked_tag = 0
        self._backoff_s = 1.0
        self._failing_since: float | None = None
        self._last_error = "not connected yet"

    # --- the runner's side -----------------------------------------------------------------

    def start(self) -> None:
        """Starts the I/O thread; it connects, consumes and reconnects by itself."""
        self._thread = threading.Thread(
            target=self._run, name=f"hutch-consumer-{self.queue}", daemon=True
        )
        self._thread.start()

    @property
    def live_epoch(self) -> int | None:
        """The epoch of the open channel, or None while disconnected."""
        with self._cond:
            return self._live_epoch

    def wait_until_consuming(self, timeout_s: float) -> bool:
        """True once basic.consume-ok arrived; raises if the consumer failed for good."""
        deadline = time.monotonic() + timeout_s
        while not self._consuming.is_set() and self._fatal is None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            self._consuming.wait(min(remaining, 0.05))
        self._raise_if_failed()
        return self._consuming.is_set()

    @property
    def last_error(self) -> str:
        """Why the last attempt to consume failed (a connect failure or a channel close)."""
        return self._last_error

    @property
    def give_up_after_s(self) -> float:
        """How long the consumer retries before it fails for good."""
        return self._give_up_after_s

    def wait_for_epoch(self, timeout_s: float) -> int | None:
        """The epoch of the channel once it consumes (None after `timeout_s`); raises if the
        consumer failed for good. While a reconnect is under way this waits for the new one."""
        deadline = time.monotonic() + timeout_s
        while True:
            with self._cond:
                epoch = self._live_epoch
            if epoch is not None and self._consuming.is_set():
                return epoch
            self._raise_if_failed()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            self._consuming.wait(min(remaining, 0.05))

    def take(self, *, max_messages: int, max_bytes: int, timeout_s: float) -> list[Delivery]:
        """Up to max_messages/max_bytes buffered deliveries (at least one if any arrive)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            # Set before the buffer is checked: an append either sees it (and notifies) or
            # happened before the check.
            self._runner_waiting = True
            try:
                while not self._buffer and self._fatal is None:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    self._cond.wait(remaining)
            finally:
                self._runner_waiting = False
            self._raise_if_failed()
            taken: list[Delivery] = []
            size = 0
            while self._buffer and len(taken) < max_messages:
                body_size = len(self._buffer[0].body)
                if taken and size + body_size > max_bytes:
                    break
                taken.append(self._buffer.popleft())
                size += body_size
            return taken

    def ack_through(self, *, epoch: int, tag: int) -> None:
        """Acks every delivery up to `tag` on channel `epoch`; a stale epoch is dropped."""
        with self._cond:
            connection = self._connection
            if connection is None or epoch != self._live_epoch:
                log.info("hutch: not acking tag %d of closed channel epoch %d", tag, epoch)
                return
        try:
            connection.ioloop.add_callback_threadsafe(
                functools.partial(self._ack_in_loop, epoch, tag)
            )
        except Exception as error:  # noqa: BLE001 - a closing ioloop: the epoch is over anyway
            log.info("hutch: ack of tag %d dropped, connection closing: %s", tag, error)

    def queue_depth(self, timeout_s: float) -> int:
        """Ready messages (passive queue.declare) plus buffered ones, at one instant.

        The declare-ok arrives on the same connection after every delivery the broker sent
        before it, so counting the buffer in its callback misses nothing and counts nothing
        twice.
        """
        if not self.wait_until_consuming(timeout_s):
            raise HutchConnectionError(
                f"hutch: could not consume from queue {self.queue!r} within {timeout_s:.0f} s: "
                f"{self._last_error}"
            )
        result: concurrent.futures.Future[int] = concurrent.futures.Future()
        with self._cond:
            connection = self._connection
        if connection is None:
            raise HutchConnectionError(f"hutch: lost the connection to queue {self.queue!r}")
        connection.ioloop.add_callback_threadsafe(functools.partial(self._declare, result))
        return result.result(timeout=timeout_s)

    def stop(self, timeout_s: float = 10.0) -> None:
        """Closes the connection (the broker re-queues everything unacked) and joins."""
        self._stopping.set()
        with self._cond:
            connection = self._connection
        if connection is not None:
            try:
                connection.ioloop.add_callback_threadsafe(self._close_in_loop)
            except Exception as error:  # noqa: BLE001 - already closed
                log.debug("hutch: consumer already closed: %s", error)
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _raise_if_failed(self) -> None:
        if self._fatal is not None:
            raise self._fatal

    # --- the I/O thread --------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stopping.is_set():
            self._serve_one_connection()
            if self._stopping.is_set() or self._fatal is not None:
                break
            now = self._clock()
            if self._failing_since is None:
                self._failing_since = now
            if now - self._failing_since >= self._give_up_after_s:
                self._fail(
                    f"hutch: cannot consume from queue {self.queue!r} for "
                    f"{self._give_up_after_s:.0f} s; last error: {self._last_error}"
                )
                break
            log.warning(
                "hutch: queue %r consumer down (%s); reconnecting in %.0f s",
                self.queue,
                self._last_error,
                self._backoff_s,
            )
            self._stopping.wait(self._backoff_s)
            self._backoff_s = min(self._backoff_s * 2, self._max_backoff_s)

    def _serve_one_connection(self) -> None:
        try:
            connection = _FastConnection(
                self._parameters,
                on_open_callback=self._on_open,
                on_open_error_callback=self._on_open_error,
                on_close_callback=self._on_closed,
            )
        except Exception as error:  # noqa: BLE001 - any failure to connect is retried
            self._last_error = failures.connect_failure(error, self._endpoint)
            return
        with self._cond:
            self._connection = connection
        if self._stopping.is_set():
            connection.ioloop.add_callback_threadsafe(self._close_in_loop)
        try:
            connection.ioloop.start()
        finally:
            with self._cond:
                self._connection = None
                self._lose_epoch()
            self._consuming.clear()
            connection.ioloop.close()

    def _on_open(self, connection: SelectConnection) -> None:
        connection.channel(on_open_callback=self._on_channel_open)

    def _on_open_error(self, connection: SelectConnection, error: BaseException) -> None:
        self._last_error = failures.connect_failure(error, self._endpoint)
        if failures.is_final(error):
            self._fail(f"hutch: cannot consume from queue {self.queue!r}: {self._last_error}")
        connection.ioloop.stop()

    def _on_closed(self, connection: SelectConnection, reason: BaseException) -> None:
        self._last_error = f"connection closed: {reason}"
        connection.ioloop.stop()

    def _on_channel_open(self, channel: Any) -> None:
        self._channel = channel
        channel.add_on_close_callback(self._on_channel_closed)
        channel.add_on_cancel_callback(self._on_cancelled)
        channel.basic_qos(prefetch_count=self._prefetch, callback=self._on_qos_ok)

    def _on_qos_ok(self, _frame: Any) -> None:
        self._epochs += 1
        self._acked_tag = 0
        with self._cond:
            self._live_epoch = self._epochs
        self._channel.basic_consume(
            self.queue,
            self._on_message,
            auto_ack=False,
            exclusive=self._exclusive,
            arguments=self._arguments,
            callback=self._on_consume_ok,
        )

    def _on_consume_ok(self, _frame: Any) -> None:
        channel = self._channel
        connection = channel.connection if channel is not None else None
        if isinstance(connection, _FastConnection):
            # From here on this channel's deliveries skip pika's dispatch (same handling).
            connection.sink = _DeliverySink(channel.channel_number, self._on_delivery)
        self._failing_since = None
        self._backoff_s = 1.0
        self._consuming.set()
        log.info("hutch: consuming queue %r (channel epoch %d)", self.queue, self._epochs)

    def _on_message(self, _channel: Any, method: Any, props: Any, body: bytes) -> None:
        self._on_delivery(
            method.delivery_tag,
            method.redelivered,
            method.exchange,
            method.routing_key,
            props,
            body,
        )

    def _on_delivery(
        self,
        tag: int,
        redelivered: bool,
        exchange: str,
        routing_key: str,
        props: Any,
        body: bytes,
    ) -> None:
        # The hot path: no lock. Only this thread appends to or clears the buffer (deque
        # appends are atomic), and the runner is woken only when it waits on an empty buffer.
        epoch = self._epochs
        if self._live_epoch != epoch:
            return
        self._buffer.append(
            Delivery(
                epoch,
                tag,
                redelivered,
                exchange,
                routing_key,
                props,
                body,
                time.time_ns() // 1000,
            )
        )
        if self._runner_waiting:
            with self._cond:
                self._cond.notify()

    def _on_channel_closed(self, channel: Any, reason: BaseException) -> None:
        connection = getattr(channel, "connection", None)
        if isinstance(connection, _FastConnection):
            connection.sink = None
        with self._cond:
            self._lose_epoch()
        code = getattr(reason, "reply_code", None)
        text = getattr(reason, "reply_text", str(reason))
        refusal = failures.consume_refusal(code, text, queue=self.queue, exclusive=self._exclusive)
        if refusal is not None:
            self._fail(refusal)
        else:
            self._last_error = f"channel closed: {code} {text}"
        self._close_in_loop()

    def _on_cancelled(self, _frame: Any) -> None:
        connection = getattr(self._channel, "connection", None)
        if isinstance(connection, _FastConnection):
            connection.sink = None  # pika drops deliveries after a cancel; so do we
        self._fail(
            f"hutch: the broker cancelled our consumer of queue {self.queue!r} "
            "(basic.cancel: the queue was deleted?)"
        )
        self._close_in_loop()

    def _ack_in_loop(self, epoch: int, tag: int) -> None:
        channel = self._channel
        if epoch != self._epochs or channel is None or not channel.is_open:
            return
        if tag > self._acked_tag:
            channel.basic_ack(delivery_tag=tag, multiple=True)
            self._acked_tag = tag

    def _declare(self, result: concurrent.futures.Future[int]) -> None:
        def on_declared(frame: Any) -> None:
            result.set_result(frame.method.message_count + len(self._buffer))

        channel = self._channel
        if channel is None or not channel.is_open:
            result.set_exception(HutchConnectionError(f"hutch: no channel for {self.queue!r}"))
            return
        channel.queue_declare(self.queue, passive=True, callback=on_declared)

    def _close_in_loop(self) -> None:
        with self._cond:
            connection = self._connection
        if connection is None:
            return
        if connection.is_closing or connection.is_closed:
            return
        try:
            connection.close()
        except pika.exceptions.ConnectionWrongStateError:
            connection.ioloop.stop()

    def _lose_epoch(self) -> None:
        """Called with _cond held: the channel is gone, and so are its deliveries."""
        self._live_epoch = None
        self._buffer.clear()
        self._cond.notify_all()

    def _fail(self, message: str) -> None:
        log.error("%s", message)
        with self._cond:
            if self._fatal is None:
                self._fatal = HutchConnectionError(message)
            self._cond.notify_all()
