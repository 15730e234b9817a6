"""asyncio adapters: sockets, timers, the group-commit thread; no broker logic."""
