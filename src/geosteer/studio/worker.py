"""One thread runs every model pass of a studio session, from a bounded priority queue.

Reads never wait behind a generation, and waiting generations hold no server thread: requests reserve a
place, submit a job and await its future. Analysis jobs run before queued generations; beyond
``max_queue`` a reservation fails at once with :class:`QueueFull` (503), before any state changes.
"""

from __future__ import annotations

import itertools
import math
import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

KINDS = {"analysis": 0, "generate": 1}  # priority: lower runs first


def done(value) -> Future:
    """A future that already holds ``value`` (a cached result: nothing to queue)."""
    f: Future = Future()
    f.set_result(value)
    return f


class QueueFull(Exception):
    """No room for another job of this kind; ``retry_after`` is a whole-second estimate."""

    def __init__(self, kind: str, depth: int, limit: int, retry_after: int):
        super().__init__(f"the model is busy: {depth} {kind} jobs queued or running (limit {limit}); "
                         f"retry in about {retry_after} s")
        self.retry_after = retry_after


class Ticket:
    """A reserved place in the queue: ``submit(fn)`` once, or ``cancel()`` to give the place back."""

    def __init__(self, worker: ModelWorker, kind: str):
        self.worker, self.kind, self._used = worker, kind, False

    def submit(self, fn: Callable[[], object]) -> Future:
        if self._used:
            raise RuntimeError("ticket already used")
        self._used = True
        return self.worker._put(self.kind, fn)

    def cancel(self) -> None:
        if not self._used:
            self._used = True
            self.worker._release(self.kind)


class ModelWorker:
    def __init__(self, max_queue: int = 32, max_analysis: int = 64, name: str = "geosteer-studio-model"):
        if max_queue < 1 or max_analysis < 1:
            raise ValueError("queue limits must be at least 1")
        self.limits = {"generate": int(max_queue), "analysis": int(max_analysis)}
        self.name = name
        self._q: queue.PriorityQueue = queue.PriorityQueue()
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._pending = dict.fromkeys(KINDS, 0)
        self._thread: threading.Thread | None = None
        self.running: str | None = None
        self.completed = 0
        self._seconds = {"generate": 1.0, "analysis": 0.2}  # running mean job time, for Retry-After

    def reserve(self, kind: str) -> Ticket:
        if kind not in KINDS:
            raise ValueError(f"unknown job kind {kind!r}")
        with self._lock:
            depth = self._pending[kind]
            if depth >= self.limits[kind]:
                wait = math.ceil(self._seconds[kind] * depth)
                raise QueueFull(kind, depth, self.limits[kind], max(1, min(60, wait)))
            self._pending[kind] += 1
        return Ticket(self, kind)

    def run(self, kind: str, fn: Callable[[], object]) -> Future:
        """Reserve and submit in one step (raises :class:`QueueFull` when there is no room)."""
        return self.reserve(kind).submit(fn)

    def depth(self) -> dict:
        with self._lock:
            return {"generate": self._pending["generate"], "analysis": self._pending["analysis"],
                    "limit": self.limits["generate"], "running": self.running}

    def _release(self, kind: str) -> None:
        with self._lock:
            self._pending[kind] -= 1

    def _put(self, kind: str, fn: Callable[[], object]) -> Future:
        fut: Future = Future()
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
        self._q.put((KINDS[kind], next(self._seq), kind, fn, fut))
        return fut

    def _loop(self) -> None:
        while True:
            _, _, kind, fn, fut = self._q.get()
            try:
                if not fut.set_running_or_notify_cancel():
                    continue
                self.running = kind
                t0 = time.perf_counter()
                try:
                    fut.set_result(fn())
                except BaseException as e:  # the requester gets the error; the worker keeps going
                    fut.set_exception(e)
                dt = time.perf_counter() - t0
                self._seconds[kind] = 0.8 * self._seconds[kind] + 0.2 * dt
                self.completed += 1
            finally:
                self.running = None
                self._release(kind)
