"""Connections in the host's namespace after the unshare ([TCPServerTunnel]'s
targets are on the host's network).

Once unshared, the proxy cannot go back: setns(2) into the host's network
namespace needs CAP_SYS_ADMIN over the user namespace that owns it.  So a
child forked before the unshare stays there and makes sockets on request: it
gets "ID tcp HOST PORT" (a connection), "ID udp ADDRESS" (a UDP socket bound
to ADDRESS, port 0: SOCKS5 UDP ASSOCIATE's relay) or "ID outer PORT" (the
engine's UDP socket, as `vpncrypt up` opens it: a listen-port change over the
UAPI) on a SOCK_SEQPACKET pair
and answers "ID ok" with the socket (SCM_RIGHTS), or "ID err ERRNO".  It dies
with the proxy (PR_SET_PDEATHSIG, and the pair's end of file).
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import functools
import os
import signal
import socket
import threading
from collections.abc import Callable

from vpncrypt.daemon.udpsocket import open_udp_sockets

PR_SET_PDEATHSIG = 1
CONNECT_TIMEOUT = 30.0


def _serve(sock: socket.socket) -> None:
    """The child's loop on one channel.  A connect runs in a thread of its
    own (a slow one waits alone); a UDP socket is made and sent here, and the
    child's copy closed before the next request is read: a request that
    binds the same port next (the UAPI's check of a new listen port, then
    the rebind) never meets the copy of the one before."""
    lock = threading.Lock()

    def answer(req_id: str, make: Callable[[], socket.socket]) -> None:
        try:
            made = make()
        except OSError as e:
            with lock:
                sock.send(f"{req_id} err {e.errno or errno.EHOSTUNREACH}".encode())
            return
        with lock, made:
            socket.send_fds(sock, [f"{req_id} ok".encode()], [made.fileno()])

    while True:
        msg = sock.recv(512)
        if not msg:
            return
        req_id, kind, host, *port = msg.decode().split(" ")
        if kind == "tcp":
            connect = functools.partial(
                socket.create_connection, (host, int(port[0])), timeout=CONNECT_TIMEOUT
            )
            threading.Thread(target=answer, args=(req_id, connect), daemon=True).start()
        elif kind == "outer":
            answer(req_id, lambda: open_udp_sockets(int(host))[0])
        else:
            answer(req_id, functools.partial(_udp, host))


def _udp(address: str) -> socket.socket:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        sock.bind((address, 0))
    except OSError:
        sock.close()
        raise
    return sock


class HostConnector:
    """connect(host, port) in the namespace the proxy started in."""

    def __init__(self, sock: socket.socket, sync: socket.socket, pid: int) -> None:
        self.sock = sock  # the loop's channel (non-blocking, read by the loop)
        self.sync = sync  # the blocking one, for calls from any thread (one at a time)
        self._sync_lock = threading.Lock()
        self.pid = pid
        self._next = 0
        self._waiting: dict[str, asyncio.Future[socket.socket]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    @classmethod
    def fork(cls) -> "HostConnector":
        """The child, forked now (before the unshare and any thread)."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        sync, sync_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child (coverage does not follow it)
            mine.close()
            sync.close()
            try:
                ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
                if os.getppid() == parent:  # (else the parent died before the prctl)
                    threading.Thread(target=_serve, args=(sync_theirs,), daemon=True).start()
                    _serve(theirs)
            finally:
                os._exit(0)
        theirs.close()
        sync_theirs.close()
        mine.setblocking(False)
        sync.settimeout(CONNECT_TIMEOUT)
        return cls(mine, sync, pid)

    def outer_udp(self, port: int) -> socket.socket:
        """The engine's new UDP socket on `port` in the host's namespace,
        waited for on the blocking channel (the UAPI's check of a new port
        runs on a worker thread, the rebind on the loop: a listen-port
        change is applied in one synchronous step)."""
        with self._sync_lock:
            self.sync.send(f"0 outer {port}".encode())
            msg, fds, _flags, _addr = socket.recv_fds(self.sync, 512, 1)
        if not msg:
            raise OSError(errno.EPIPE, "the host-side helper exited")
        _id, status, *rest = msg.decode().split(" ")
        if status == "ok" and fds:
            return socket.socket(fileno=fds[0])
        for fd in fds:
            os.close(fd)
        code = int(rest[0]) if rest else errno.EIO
        raise OSError(code, os.strerror(code))

    def _readable(self) -> None:
        try:
            msg, fds, _flags, _addr = socket.recv_fds(self.sock, 512, 1)
        except BlockingIOError:
            return
        except OSError:
            msg, fds = b"", []
        if not msg:  # the child is gone: every waiting connect fails
            self._fail_all()
            return
        req_id, status, *rest = msg.decode().split(" ")
        self._answer(req_id, status, rest, fds)

    def _answer(self, req_id: str, status: str, rest: list[str], fds: list[int]) -> None:
        fut = self._waiting.pop(req_id, None)
        if status == "ok" and fds:
            conn = socket.socket(fileno=fds[0])
            if fut is None or fut.done():
                conn.close()
            else:
                fut.set_result(conn)
        elif fut is not None and not fut.done():
            code = int(rest[0]) if rest else errno.EIO
            fut.set_exception(OSError(code, os.strerror(code)))

    def _fail_all(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self.sock.fileno())
        for fut in self._waiting.values():
            if not fut.done():
                fut.set_exception(OSError(errno.EPIPE, "the host-side helper exited"))
        self._waiting.clear()

    async def connect(self, host: str, port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        conn = await self._ask("tcp", host, str(port))
        return await asyncio.open_connection(sock=conn)

    async def udp_socket(self, address: str) -> socket.socket:
        """A UDP socket in the host's namespace bound to `address`, port 0."""
        return await self._ask("udp", address)

    async def _ask(self, *request: str) -> socket.socket:
        if any(not part or " " in part for part in request):
            raise OSError(errno.EINVAL, "a host name without spaces")
        loop = asyncio.get_running_loop()
        if self._loop is None:
            self._loop = loop
            loop.add_reader(self.sock.fileno(), self._readable)
        self._next += 1
        req_id = str(self._next)
        fut: asyncio.Future[socket.socket] = loop.create_future()
        self._waiting[req_id] = fut
        try:
            self.sock.send(" ".join((req_id, *request)).encode())
            return await fut
        finally:
            self._waiting.pop(req_id, None)

    def close(self) -> None:
        if self._loop is not None:
            self._loop.remove_reader(self.sock.fileno())
            self._loop = None
        self.sock.close()
        self.sync.close()
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
