"""Handshake work off the event loop: the compute phase of a slice of queued
handshake messages (vpncrypt.protocol.handshake_work: the X25519 and Noise
hashing of an initiation, which changes no state) on a small pool of
threads, so that a reconnect storm is served by more than one core.  X25519
is one libsodium call through cffi, which releases the GIL; the Python parts
of the work still take turns on it.

    workers = HandshakeWorkers(loop, threads=2)     # or executor=... (tests)
    workers.run(work, done)     # compute() of each item; done() on the loop
    workers.close()

The apply phase stays on the event loop, in the Device (the engine calls
Device.finish_handshake_work from ``done``)."""

import asyncio
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor

from vpncrypt.protocol.handshake_work import HandshakeWork


class HandshakeWorkers:
    def __init__(
        self, loop: asyncio.AbstractEventLoop, threads: int = 2, executor: Executor | None = None
    ) -> None:
        self.loop = loop
        self.threads = max(1, int(threads))
        self._own = executor is None
        self.executor: Executor = (
            executor
            if executor is not None
            else ThreadPoolExecutor(self.threads, thread_name_prefix="vpncrypt-hs")
        )

    def run(self, work: Sequence[HandshakeWork], done: Callable[[], object]) -> None:
        """compute() of every item of `work`, spread over the threads (one
        share each); ``done()`` is then called on the loop's thread."""
        if not work:
            self.loop.call_soon(done)
            return
        n = min(self.threads, len(work))
        left = [n]
        lock = threading.Lock()

        def share(items: Sequence[HandshakeWork]) -> None:
            try:
                for w in items:
                    w.compute()  # never raises (see HandshakeWork.compute)
            finally:
                with lock:
                    left[0] -= 1
                    last = left[0] == 0
                if last:
                    try:
                        self.loop.call_soon_threadsafe(done)
                    except RuntimeError:  # the loop is closed: nobody waits
                        pass

        for i in range(n):
            self.executor.submit(share, work[i::n])

    def close(self) -> None:
        if self._own:
            self.executor.shutdown(wait=False, cancel_futures=True)
