"""Wiring of one broker process: model, store, listeners, end-of-tick work, shutdown.

End of tick (``_end_of_tick``, scheduled at most once per loop iteration):
1. save definitions if a durable definition changed: the tick's changes appended to the
   definitions journal with one fdatasync. When the journal has grown enough, a compaction
   starts in the background (``_compact_in_background``): the model exported in slices, the
   snapshot encoded and written in a worker thread, while the journal keeps taking appends;
2. start the group-commit fsync of the message store in a worker thread if
   anything was appended and no sync is running (P-3);
3. release publisher confirms that need no sync, and throttled publishers (whose buffered
   frames may change definitions again: then step 1 runs once more);
4. write every dirty connection's output with one ``writelines``.
So no declare-ok precedes its definition on disk; management replies wait for the same save
(``_durable_replies_middleware``). When a sync finishes, the confirms it made durable are
released.
"""

from __future__ import annotations

import asyncio
import json
import logging
import shutil
import signal
import socket
import time
from typing import TYPE_CHECKING, Any

from hutch_broker import __version__, memory, native
from hutch_broker.config import BrokerConfig
from hutch_broker.dispatch.context import Context, wall_clock_ms
from hutch_broker.model.broker import Broker
from hutch_broker.model.changes import Change
from hutch_broker.model.messages import Entry, Message
from hutch_broker.model.queues import Queue
from hutch_broker.protocol import contentscan, errors, handshakes, identity
from hutch_broker.server import tlsreload
from hutch_broker.server.amqp import AMQPConnection
from hutch_broker.server.resources import ResourceMonitor
from hutch_broker.store import DefinitionsStore, MessageStore, QueueStore, StoreError, records

if TYPE_CHECKING:
    from aiohttp import web
    from aiohttp.typedefs import Handler, Middleware

log = logging.getLogger(__name__)

SHUTDOWN_TEXT = "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'"


class BrokerServer:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        # Before the data directory is touched: bad TLS files refuse the start and change nothing.
        # Each TLS listener serves the certificate its files hold now (server/tlsreload.py).
        self.amqps_tls, self.https_tls = tlsreload.reloaders(config)
        self.loop = asyncio.get_event_loop()
        config.data_dir.mkdir(parents=True, exist_ok=True)
        self.definitions = DefinitionsStore(config.data_dir)
        self.store = MessageStore(
            config.data_dir / "msgs", quarantine_dir=config.data_dir / "quarantine"
        )
        paging_dir = config.data_dir / "paging"
        shutil.rmtree(paging_dir, ignore_errors=True)  # paged bodies are worthless after a restart
        self.paging_store = MessageStore(paging_dir)
        self.broker = Broker(
            cluster_name=config.cluster_name or f"hutch@{socket.gethostname()}",
            clock=wall_clock_ms,
            paging_store=self.paging_store,
            message_logs=self.store,
            loopback_users=config.loopback_users,
        )
        self.connections: set[AMQPConnection] = set()
        self.resources = ResourceMonitor(
            watermark=memory.Watermark(
                relative=config.watermark_relative, absolute=config.watermark_absolute
            ),
            total_memory=memory.detect_total_memory(config.total_memory),
            data_dir=config.data_dir,
            disk_free_limit=config.disk_free_limit,
            on_clear=self._alarm_cleared,
            on_paging=self.broker.set_paging,
        )
        self.context = Context(
            self.broker,
            clock=wall_clock_ms,
            request_flush=self.request_flush,
            alarms=self.resources,
            stamp_message_id=config.stamp_message_id,
        )
        self._flush_scheduled = False
        self._definitions_dirty = False
        self._snapshot_due = False  # a change came without saying what: write everything
        self._changes_made = 0  # definitions changes reported by the model so far
        self._changes_settled = 0  # how many of them were saved, or failed to save and said so
        self._durable_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self.failed = False  # a write could not be made durable: stopped (see _fail_stop)
        self._sync_running: asyncio.Future[None] | None = None  # the background group commit
        self._store_closing = False  # stop() is closing the store: no background sync starts
        self._servers: list[asyncio.AbstractServer] = []
        self._stopped = asyncio.Event()
        self._done = asyncio.Event()
        self._compaction: asyncio.Task[None] | None = None  # see _compact_in_background
        self.started_at = time.time()

    # -- start-up --------------------------------------------------------

    def recover(self) -> None:
        """Definitions, then durable messages (P-1, P-2)."""
        # Message logs without a snapshot refuse the start (MissingDefinitionsError).
        stored = self.definitions.recover(other_data=bool(self.store.existing_queues()))
        if stored is None:
            self.broker.create_defaults(
                user=self.config.default_user, password=self.config.default_pass
            )
        else:
            self.broker.import_definitions(
                stored, source="amqp", set_aside=self._set_aside_definition
            )
        self._recover_messages()
        self.broker.on_definitions_changed = self._definitions_changed  # journal from now on
        self._compact_definitions()  # start from a fresh snapshot and an empty journal

    def _set_aside_definition(self, kind: str, item: dict[str, Any], reason: str) -> None:
        """A stored definition this version refuses: kept in the quarantine, not applied.

        The start-up compaction then writes definitions without it, so it is asked about once.
        A durable queue set aside here has its message log set aside too (set_aside_unclaimed).
        """
        name = item.get("name", item.get("user", ""))
        entry = self.store.quarantine.keep(
            json.dumps(item, indent=2, sort_keys=True).encode(),
            name=f"{kind}.json",
            label=f"definition-{kind}",
            reason=f"recovery could not apply this {kind} ({name!r}): {reason}",
        )
        log.error(
            "recovery: %s %r in vhost %r not applied and set aside in %s: %s",
            kind,
            name,
            item.get("vhost", ""),
            entry,
            reason,
        )

    def _recover_messages(self) -> None:
        live: set[tuple[str, str]] = set()
        now_ms = self.context.clock()
        for vhost in self.broker.vhosts.values():
            for queue in vhost.queues.values():
                if not queue.durable:
                    continue
                live.add((vhost.name, queue.name))
                self._restore(queue, now_ms)
        self.store.set_aside_unclaimed(live)  # quarantined with an ERROR line, never deleted

    def _restore(self, queue: Queue, now_ms: int) -> None:
        """Put back what the queue's log recovered. The log is the one its declare opened
        (``import_definitions`` -> ``open_queue``), recovered as it was opened: read, not
        looked up or opened again."""
        handle = queue.store
        if not isinstance(handle, QueueStore):  # every durable queue gets its log from self.store
            raise TypeError(f"durable queue {queue.name!r} has no message log: {handle!r}")
        count = 0
        for stored in handle.recover():  # no bodies: read back at the head (_page_in)
            message = Message(
                stored.exchange, stored.routing_key, stored.raw_properties, b"", persistent=True
            )
            entry = Entry(
                0, message, expire_at=stored.expire_at_ms, redelivered=True, store_id=stored.msg_id
            )
            queue.restore(entry, body_size=stored.body_size)
            count += 1
        queue.last_used_ms = now_ms
        if count:
            log.info(
                "recovered %d messages in queue '%s' in vhost '%s'", count, queue.name, queue.vhost
            )

    def _alarm_cleared(self) -> None:
        for session in list(self.context.sessions.values()):
            if session.blocked:
                session.unblock()
        self.request_flush()

    # -- model hooks -----------------------------------------------------

    def _definitions_changed(self, change: Change | None = None, /) -> None:
        if change is None:
            self._snapshot_due = True
        else:
            self.definitions.stage(change.section, change.item, deleted=change.deleted)
        self._changes_made += 1
        self._definitions_dirty = True
        self.request_flush()

    def _save_definitions(self) -> bool:
        """The tick's changes to disk: O(changes) and one fdatasync, and then the waiters.

        A failure stops the broker (``_fail_stop``): the management replies waiting for it
        get a 500, and no AMQP reply of this tick is sent.
        """
        self._definitions_dirty = False
        saving = self._changes_made
        background = self.definitions.can_compact_in_background
        try:
            if self._snapshot_due or (self.definitions.compaction_due and not background):
                self._compact_definitions()
            else:
                self.definitions.commit()
        except (OSError, StoreError) as exc:
            self._definitions_saved(saving, exc)
            self._fail_stop("saving definitions", exc)
            return False
        self._definitions_saved(saving, None)
        if self.definitions.compaction_due and self._compaction is None:
            if self.definitions.can_compact_in_background:
                self._compaction = self.loop.create_task(self._compact_in_background())
            else:
                try:
                    self._compact_definitions()
                except (OSError, StoreError):  # the committed journal still holds everything
                    log.exception("could not compact the definitions journal")
        return True

    def _compact_definitions(self) -> None:
        """In one call (start-up, stop, a change that said not what it was, after a failure);
        cancels a background compaction."""
        self._snapshot_due = True  # until it succeeds
        self.definitions.compact(self.broker.export_definitions(durable_only=True))
        self._snapshot_due = False

    async def _compact_in_background(self) -> None:
        """A compaction that costs the loop a slice per turn (store/definitions.py says why
        each step keeps every acknowledged change recoverable): appends move to a new journal,
        the model is exported in slices, and once every change the export saw is committed a
        worker thread writes the snapshot and swaps the files."""
        from hutch_broker.admin import slicing  # noqa: PLC0415 - the one slicing driver

        ticket: int | None = None
        size: int | None = None
        try:
            ticket = self.definitions.begin_compaction()
            document = await slicing.run_steps(self.broker.export_steps(durable_only=True))
            await self.definitions_durable()  # the snapshot holds no uncommitted change
            size = await self.loop.run_in_executor(
                None, self.definitions.write_compaction, ticket, document
            )
        except (OSError, StoreError):  # the journals still hold everything
            log.exception("could not compact the definitions journal")
        finally:
            if ticket is not None:
                self.definitions.finish_compaction(ticket, size)
            self._compaction = None

    def _definitions_saved(self, saving: int, failure: BaseException | None) -> None:
        """Answer the waiters; after a failure too, or every later reply would wait for a save
        that only the next change triggers (which compacts, so it saves these changes too)."""
        self._changes_settled = saving
        waiting: list[tuple[int, asyncio.Future[None]]] = []
        for wanted, future in self._durable_waiters:
            if wanted > saving:
                waiting.append((wanted, future))
            elif future.done():
                pass  # its request was cancelled
            elif failure is None:
                future.set_result(None)
            else:
                future.set_exception(failure)
        self._durable_waiters = waiting

    async def definitions_durable(self) -> None:
        """Return once every definitions change made so far is on disk; raise if saving failed."""
        if self._changes_settled >= self._changes_made:
            return
        future = self.loop.create_future()
        self._durable_waiters.append((self._changes_made, future))
        await future

    def _durable_replies_middleware(self) -> Middleware:
        """aiohttp writes a reply in the very callback that made the change, before the end of
        the tick saves it: without this, a PUT could be answered and then lost to a crash."""
        from aiohttp import web  # noqa: PLC0415 - see _start_http

        @web.middleware
        async def durable_replies(request: web.Request, handler: Handler) -> web.StreamResponse:
            response = await handler(request)
            await self.definitions_durable()
            return response

        return durable_replies

    def _fail_stop(self, what: str, exc: BaseException) -> None:
        """Stop as if killed, after a write that could not be made durable.

        Retrying would not do: once fsync has failed, the kernel may have dropped the dirty
        pages and a later fsync can succeed without them (PostgreSQL's "fsyncgate"), and this
        tick's buffered replies (a declare-ok, say) may acknowledge a change that is not on
        disk. So no reply is flushed, every connection is aborted, and the process exits
        non-zero for its supervisor to restart it; recovery then starts from what is durable,
        exactly as after kill -9.
        """
        if self.failed:
            return
        self.failed = True
        log.critical("%s failed (%s): stopping without sending pending replies", what, exc)
        for server in self._servers:
            server.close()
        for connection in list(self.connections):
            if connection.transport is not None:
                connection.transport.abort()
        self._stopped.set()
        self.loop.create_task(self._halt())

    async def _halt(self) -> None:
        if getattr(self, "_http_runner", None) is not None:
            await self._http_runner.cleanup()
        self.definitions.close()
        self.store.close()
        self.paging_store.close()
        log.critical("stopped after a failed write")
        self._done.set()

    # -- end of tick -----------------------------------------------------

    def request_flush(self) -> None:
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self.loop.call_soon(self._end_of_tick)

    def _end_of_tick(self) -> None:
        self._flush_scheduled = False
        every = self.resources.sample_after_bytes  # kept current by the watermark's setter
        if self.context.ingress_bytes >= every or AMQPConnection.received_bytes >= every:
            # A fast publisher can outrun a once-a-second sample: memory is checked again
            # after every 1/32 of the watermark's worth of published bodies, or of bytes
            # read (half-sent bodies never become publishes, and were read past the alarm).
            self.context.ingress_bytes = AMQPConnection.received_bytes = 0
            self.resources.sample()
        if self.failed:
            return  # nothing more goes out (see _fail_stop)
        if self._definitions_dirty and not self._save_definitions():
            return
        self.context.turns.end_of_turn()  # a slice of each publish still being routed
        if self.context.commits.wanted:  # set by the writes a confirm or a commit waits for
            self._maybe_start_sync()
        self.context.commits.release()
        self.context.release_throttled()
        # A released publisher's buffered frames may have declared something.
        if self._definitions_dirty and not self._save_definitions():
            return
        self._flush_connections()

    def _flush_connections(self) -> None:
        for session in self.context.take_dirty():
            session.transport.flush()

    def _maybe_start_sync(self, *, periodic: bool = False) -> None:
        """Run the group commit's sync in a worker thread when it asks for one.

        None starts once ``stop`` closes the store: a sync meeting a closed store fails, and a
        failed sync means a failed write (``_fail_stop``); ``stop`` syncs everything itself.
        """
        if self._store_closing:
            return
        generation = self.context.commits.start(periodic=periodic)
        if generation is None:
            return
        future = self.loop.run_in_executor(None, self.store.sync)
        self._sync_running = future
        future.add_done_callback(lambda fut: self._sync_done(fut, generation))

    def _sync_done(self, future: asyncio.Future[None], generation: int) -> None:
        self._sync_running = None  # before stop(), waiting for it, resumes
        failure = future.exception()
        if failure is None:
            self.context.commits.finished(generation)
            return
        self.context.commits.failed(generation)  # nothing it covered is ever confirmed
        self._fail_stop("syncing the message store", failure)

    # -- listeners -------------------------------------------------------

    def _protocol_options(self) -> dict[str, Any]:
        """A new connection's options; built per connection, so ``cluster_name`` is current."""
        config = self.config
        return {
            "server_properties": identity.server_properties(
                version=__version__,
                cluster_name=self.broker.display_cluster_name,
                configured=config.server_properties,
            ),
            "channel_max": config.channel_max,
            "frame_max": config.frame_max,
            "heartbeat": config.heartbeat,
            "max_body_size": config.max_message_size,
        }

    async def start(self) -> None:
        self.recover()
        self.resources.sample()

        def factory() -> AMQPConnection:
            connection = AMQPConnection(
                self.context, self._protocol_options(), on_lost=self.connections.discard
            )
            self.connections.add(connection)
            return connection

        listeners = [
            ("AMQP", self.config.amqp_port, None),
            ("AMQPS", self.config.ssl_port, tlsreload.listening(self.amqps_tls)),
        ]
        for label, port, context in listeners:
            if port is None:
                continue
            server = await self.loop.create_server(
                factory, self.config.bind, port, reuse_address=True, backlog=1024, ssl=context
            )
            self._servers.append(server)
            log.info("%s listener on %s:%d", label, self.config.bind, port)
        python = "Python: the C extension is not built, or HUTCH_BROKER_PURE_PYTHON is set"
        log.info(
            "stream reads decode records in %s",
            "C (hutch_broker.store._runs)" if records.NATIVE_RUNS else python,
        )
        log.info(
            "publishes' content frames are read in %s",
            "C (hutch_broker.protocol._content)" if contentscan.NATIVE else python,
        )
        await self._start_http()
        self.loop.create_task(self._timers())
        self.loop.create_task(self._expiry_timer())
        if self.amqps_tls or self.https_tls:
            self.loop.create_task(self._tls_reload_timer())

    async def adopt(self, sock: socket.socket, handshake: handshakes.Handshake) -> None:
        """A client socket a listener process handed over after connection.open, with its
        handshake (server/workers.py): a connection like any other from here on."""

        def factory() -> AMQPConnection:
            connection = AMQPConnection(
                self.context,
                self._protocol_options(),
                on_lost=self.connections.discard,
                handshake=handshake,
            )
            self.connections.add(connection)
            return connection

        await self.loop.connect_accepted_socket(factory, sock)

    async def _start_http(self) -> None:
        from aiohttp import web  # noqa: PLC0415 - keeps AMQP-only tests free of aiohttp start-up

        from hutch_broker.admin.app import make_app  # noqa: PLC0415
        from hutch_broker.admin.views.overview import NodeInfo  # noqa: PLC0415
        from hutch_broker.server import httpguard  # noqa: PLC0415

        config = self.config
        node = NodeInfo(
            amqp_port=config.amqp_port,
            http_port=config.http_port,
            amqps_port=config.ssl_port,
            https_port=config.management_ssl_port,
            listen_host=config.bind,
            started_at_ms=int(self.started_at * 1000),
            data_dir=str(config.data_dir),
            disk_free_limit=config.disk_free_limit,
            native=tuple(sorted(native.LOADED)),
        )
        app = make_app(
            self.context,
            memory=self.resources,
            node=node,
            operator_policy_changes_disabled=self.config.operator_policy_changes_disabled,
            send_stall_s=config.http_request_timeout_s,
        )
        app.middlewares.append(self._durable_replies_middleware())  # innermost
        limiter = httpguard.RateLimitedLog()
        httpguard.SERVER_LOG.addFilter(httpguard.OneLineParseErrors(limiter))
        fd_limit = httpguard.raise_fd_limit()
        guard = httpguard.ConnectionGuard(
            httpguard.connection_cap(config.http_max_connections, fd_limit), limiter
        )
        runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            keepalive_timeout=config.http_request_timeout_s,  # also bounds the first request
            logger=httpguard.SERVER_LOG,
        )
        await runner.setup()
        self._http_runner = runner
        log.info(
            "management: at most %d connections, %.0f s to send a request's headers "
            "(file descriptor limit %d)",
            guard.cap,
            config.http_request_timeout_s,
            fd_limit,
        )
        sites = [
            ("HTTP", config.http_port, None),
            ("HTTPS", config.management_ssl_port, tlsreload.listening(self.https_tls)),
        ]
        for label, port, context in sites:
            if port is None:
                continue
            site = httpguard.GuardedSite(
                runner,
                config.bind,
                port,
                guard=guard,
                handshake_timeout_s=config.http_request_timeout_s,
                ssl_context=context,
            )
            await site.start()
            log.info("%s management listener on %s:%d", label, config.bind, port)

    async def _timers(self) -> None:
        while not self._stopped.is_set():
            await asyncio.sleep(1.0)
            self.resources.sample()
            self._tick_connections(time.monotonic())
            self._sync_lazily()
            self.broker.pager.sync()

    def _sync_lazily(self) -> None:
        """Acks and dead-lettered records need no confirm: the timer syncs them once a second,
        and only when a log holds a write no sync covered yet. An idle broker used to start an
        empty sync in a worker thread every second, and a tick to hear that it finished."""
        if self._store_closing or self.context.commits.running or not self.store.dirty:
            return
        self._maybe_start_sync(periodic=True)

    async def _tls_reload_timer(self) -> None:
        """Renewed certificate files serve new connections (server/tlsreload.py), read in a
        thread: a slow volume never stalls the event loop."""
        reloaders = [item for item in (self.amqps_tls, self.https_tls) if item is not None]
        while not self._stopped.is_set():
            await asyncio.sleep(tlsreload.CHECK_INTERVAL_S)
            for reloader in reloaders:
                await asyncio.to_thread(reloader.check)

    def _tick_connections(self, now: float) -> None:
        """Not inline in ``_timers``: a loop variable of that coroutine kept the last connection
        it ticked alive while it slept, for as long as no other connection came, and with it
        whatever its client had sent (docs/isolation/memory.md, memory after hostile input)."""
        for connection in list(self.connections):
            closed = connection.session is not None and connection.session.closed
            if closed and not connection.awaiting_client_close:
                self.connections.discard(connection)
                continue
            connection.tick(now, self.config.handshake_timeout_s, self.config.closing_timeout_s)

    async def _expiry_timer(self) -> None:
        """Message TTL at the head and queue expiry, checked every 100 ms."""
        while not self._stopped.is_set():
            await asyncio.sleep(0.1)
            self.broker.tick(self.context.clock())
            self.context.release_throttled()
            self.request_flush()

    # -- shutdown --------------------------------------------------------

    def install_signal_handlers(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(signum, lambda: self.loop.create_task(self.stop()))

    async def stop(self) -> None:
        """Stop accepting, close clients with 320, flush the store (clean shutdown)."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        log.info("shutting down")
        for server in self._servers:
            server.close()
        for connection in list(self.connections):
            session = connection.session
            if session is not None and not session.closed and session.vhost is not None:
                session.proto.close(errors.connection_forced(SHUTDOWN_TEXT))
                connection.flush()
        await asyncio.sleep(0.1)
        for connection in list(self.connections):
            connection.close_transport()
        if getattr(self, "_http_runner", None) is not None:
            await self._http_runner.cleanup()
        # A background sync may still be running: closing the store under it made it fail
        # and log a failed write after a clean stop. Let it end first; none starts after.
        self._store_closing = True
        while self._sync_running is not None:
            await asyncio.wait([self._sync_running])
        if self.failed:
            return  # it failed for real: _fail_stop finishes the stop
        try:
            self.store.sync()
        except (OSError, StoreError) as exc:
            self._fail_stop("syncing the message store", exc)
            return
        if self._definitions_dirty and not self._save_definitions():
            return  # _fail_stop finishes the stop
        if self._compaction is not None:  # the compaction below cancels it; nothing is lost
            self._compaction.cancel()
        try:  # after a clean stop, definitions.json alone holds everything
            self._compact_definitions()
        except (OSError, StoreError):
            log.exception("could not compact the definitions journal")
        self.definitions.close()
        self.store.close()
        self.paging_store.close()
        log.info("stopped")
        self._done.set()

    async def wait_stopped(self) -> None:
        await self._done.wait()
