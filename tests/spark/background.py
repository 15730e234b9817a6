"""A call run in a thread of its own, for a test that must act while it runs and then fail
with its own message, not hang, when the call never ends.

Why: the stream read tests start a read, act on the broker meanwhile (delete the stream) or only
wait (heartbeats that must not extend readTimeoutMs), and then need the error the read ended
with. A read that never ends must fail the test with what that means, inside the test's timeout;
so the thread is a daemon, joined for at most a guard, and its error is handed to the test.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class Background:
    """Runs `call` in a daemon thread at once; `error` joins it and gives what it raised."""

    def __init__(self, call: Callable[[], object]) -> None:
        self.errors: list[BaseException] = []
        self._call = call
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._call()
        except BaseException as error:  # noqa: BLE001 - handed to the test's thread
            self.errors.append(error)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def error(self, guard_s: float, what: str, hang: str) -> BaseException:
        """The one error the call ended with, waiting at most `guard_s` for it. `what` names
        the call in a failure's message, and `hang` says what a call still running means."""
        self._thread.join(guard_s)
        assert not self._thread.is_alive(), f"{what} had not ended {guard_s:.0f} s later: {hang}"
        assert len(self.errors) == 1, f"{what} ended with {self.errors}"
        return self.errors[0]
