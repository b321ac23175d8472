"""A UNIX stream socket served on a thread, for tests that stand in for a UAPI
server: each connection goes to handle(conn) and is closed after it."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable


class UnixServer:
    """Listens on path at once; serve() starts the thread, close() stops it
    and closes the socket (the file at path is the caller's).  As a context
    manager: served within the block, closed at its end."""

    def __init__(self, path: str, handle: Callable[[socket.socket], None], backlog: int = 8) -> None:
        self.handle = handle
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(backlog)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        self.sock.settimeout(0.2)
        while not self._stop.is_set():
            try:
                c, _ = self.sock.accept()
            except socket.timeout:
                continue
            try:
                self.handle(c)
            except OSError:
                pass
            finally:
                c.close()

    def serve(self) -> UnixServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)
        self.sock.close()

    def __enter__(self) -> UnixServer:
        return self.serve()

    def __exit__(self, *exc: object) -> None:
        self.close()
