"""Linux TUN device: create one (TUNSETIFF, IFF_TUN | IFF_NO_PI), or attach
to a persistent one that the administrator made (`ip tuntap add NAME mode
tun`), as wireguard-go does; set the MTU, bring it up, add addresses.

What vpncrypt created it deletes on close, by ifindex (a newer interface
that took the same name is never touched).  A device it attached to stays,
with its own addresses; only the addresses vpncrypt added are removed.

The interface may be moved to another network namespace (`ip link set
IFACE netns NS`, WireGuard's netns deployment) and back; the UDP socket
stays where it was made.  So the device is identified by its TUN file
descriptor, never by a name or index looked up in the daemon's namespace
(another interface there may take the name or the index):

* gone(): TUNGETIFF on the fd fails with EBADFD once the device was
  deleted, in whichever namespace it was; any other failure (no memory, no
  descriptors left) is not evidence that it is gone;
* its current name comes from TUNGETIFF, its namespace from TUNGETDEVNETNS
  (Linux 5.2), and the MTU and flags are read and set through a socket made
  in that namespace (by a short-lived thread that joins it), so that
  `ip -n NS link set IFACE mtu N` there takes effect here;
* on close, a device vpncrypt created is deleted in the namespace where
  it is now, by the index it has there (the kernel also deletes it with the
  last descriptor);
  addresses vpncrypt added to a persistent device are removed only while
  the device is in the daemon's namespace (a move drops them anyway)."""

from __future__ import annotations

import errno
import fcntl
import ipaddress
import json
import logging
import os
import re
import socket
import struct
import subprocess
import threading
from typing import Callable, Iterable, Optional, TypeVar

from vpncrypt.dataplane.io import IFF_NO_PI, IFF_TUN, IFF_VNET_HDR, TUNSETIFF, set_txqueuelen
from vpncrypt.wire import DEFAULT_MTU

log = logging.getLogger("vpncrypt.tun")
T = TypeVar("T")

# TUNSETIFF and the IFF_TUN, IFF_NO_PI, IFF_VNET_HDR flags are vpncrypt.dataplane.io's
# (IFF_VNET_HDR: a virtio_net_hdr before each packet, for the TUN offloads TSO/USO and GRO).
TUN_PATH = "/dev/net/tun"
TXQUEUELEN = 4096  # packets the kernel queues for us to read (the default 500 drops bursts)
IFF_UP = 0x1
SIOCGIFFLAGS = 0x8913
SIOCSIFFLAGS = 0x8914
SIOCGIFMTU = 0x8921
SIOCSIFMTU = 0x8922
SIOCGIFNAME = 0x8910
SIOCGIFINDEX = 0x8933
TUNGETIFF = 0x800454D2
TUNGETDEVNETNS = 0x54E3  # _IO('T', 227): an fd of the device's network namespace (Linux 5.2)
CLONE_NEWNET = 0x40000000
IFF_PERSIST = 0x0800
IFF_MULTI_QUEUE = 0x0100  # <linux/if_tun.h>: one descriptor per queue, each attached by TUNSETIFF
MAX_QUEUES = 64  # what vpncrypt opens at most (the kernel's limit is 256 queues)
IFNAMSIZ = 16
RTM_DELLINK = 17
NLM_F_REQUEST, NLM_F_ACK = 0x1, 0x4
NLMSG_ERROR = 2
_GONE = (errno.ENODEV, errno.ENXIO)
_DETACHED = (errno.EBADFD,)  # TUNGETIFF on a descriptor whose device was deleted

_NAME_RE = re.compile(r"^[A-Za-z0-9_=+.-]{1,15}$")


class TunError(OSError):
    pass


def validate_interface_name(name: str) -> str:
    if not _NAME_RE.match(name) or name in (".", ".."):
        raise ValueError(f"invalid interface name {name!r}: 1-15 characters of letters, digits and _=+.-")
    return name


def _ifreq(name: str, fmt: str = "", *values) -> bytes:
    data = struct.pack(f"{IFNAMSIZ}s" + fmt, name.encode(), *values)
    return data.ljust(40, b"\0")


def _ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise TunError(errno.EIO, f"`ip {' '.join(args)}` failed: {r.stderr.strip()}")


class TunDevice:
    """An open TUN interface. ``fileno()`` is non-blocking; use
    loop.add_reader() or read()/write() directly.  ``created`` tells whether
    vpncrypt made the interface (else it attached to a persistent one)."""

    def __init__(self, name: str, fd: int, *, created: bool = True, ctl: socket.socket | None = None):
        self.name = name
        self._fd = fd
        self.created = created
        self._ctl = (
            ctl if ctl is not None else socket.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        )
        self._home = _ns_key("/proc/thread-self/ns/net")  # the daemon's namespace
        self.ifindex = self._index_of(name)  # at creation, in the daemon's namespace
        self._added: list = []  # addresses this process added (removed again on close)
        self._queue_fds: list[int] = []  # the queues after the first (a multi-queue device)
        self._lock: Optional[tuple[int, str]] = None  # the name's lock file (_name_lock), held while open

    @classmethod
    def create(
        cls,
        name: str,
        *,
        mtu: Optional[int] = DEFAULT_MTU,
        up: bool = True,
        addresses: Iterable = (),
        vnet_hdr: bool = False,
        queues: int = 1,
        queue_fallback: bool = False,
    ) -> "TunDevice":
        """Create interface `name`, or attach to the persistent TUN device of
        that name.  `mtu` None: leave an attached device's MTU as it is
        (a created one gets DEFAULT_MTU, 1420).  `vnet_hdr`: open it with IFF_VNET_HDR
        (for the TUN offloads; a kernel without it gets a plain TUN).

        `queues` > 1: a multi-queue device (IFF_MULTI_QUEUE), one descriptor
        per queue (queue_fds()).  A persistent device made without
        multi_queue takes one queue only: with `queue_fallback` it is opened
        with one (and a warning says so), else TunError names the fix.  A
        persistent device made with multi_queue is attached to as one too,
        with as many queues as asked (one included)."""
        validate_interface_name(name)
        if not 1 <= queues <= MAX_QUEUES:
            raise ValueError(f"queues {queues} out of range (1-{MAX_QUEUES})")
        lock = _name_lock(name)  # vpncrypt's own starts of this name: one at a time, for life
        try:
            ctl = socket.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        except BaseException:
            _unlock(lock)
            raise
        try:
            existed = _exists(ctl, name)
            fd = _open_tun_path()
        except BaseException:
            ctl.close()
            _unlock(lock)
            raise
        extra: list[int] = []
        try:
            if existed and _held(name):
                # a multi-queue device lets anyone attach one more queue (and
                # take a share of its packets): refuse it before, as the
                # kernel refuses a busy single-queue one (EBUSY)
                raise TunError(errno.EBUSY, f"cannot use interface {name}: another process is using it")
            try:
                ifr, flags_set = _attach_first(fd, name, vnet_hdr, multi_queue=queues > 1, existed=existed)
            except OSError as e:
                if existed:
                    reasons: dict[int | None, str | None] = {
                        errno.EBUSY: "another process is using it",
                        errno.EINVAL: "it exists and is not a TUN device vpncrypt can "
                        "attach to (make one with `ip tuntap add NAME mode tun`)",
                    }
                    why = reasons.get(e.errno, e.strerror)
                    raise TunError(e.errno, f"cannot use interface {name}: {why}") from None
                raise TunError(e.errno, f"cannot create TUN device {name}: {e.strerror}") from None
            actual = ifr[:IFNAMSIZ].split(b"\0", 1)[0].decode()
            if queues > 1 and not flags_set & IFF_MULTI_QUEUE:
                # only a persistent device made without multi_queue gets here
                if not queue_fallback:
                    raise TunError(
                        errno.EINVAL,
                        f"cannot open {queues} queues on interface {actual}: the persistent TUN "
                        "device was made without multi_queue (make it with `ip tuntap add "
                        f"{actual} mode tun multi_queue`, or use 1 queue)",
                    )
                log.warning(
                    "the persistent TUN device %s was made without multi_queue: using 1 queue, not %d",
                    actual,
                    queues,
                )
            elif flags_set & IFF_MULTI_QUEUE:
                for _ in range(queues - 1):
                    q = _open_tun_path()
                    extra.append(q)
                    try:
                        fcntl.ioctl(q, TUNSETIFF, _ifreq(actual, "H", flags_set))
                    except OSError as e:
                        raise TunError(
                            e.errno, f"cannot open queue {len(extra) + 1} of {actual}: {e.strerror}"
                        ) from None
            flags = struct.unpack_from("H", fcntl.ioctl(fd, TUNGETIFF, bytes(40)), IFNAMSIZ)[0]
            info = _tun_info(actual)
            if flags & IFF_MULTI_QUEUE and info is not None and info.get("numqueues", 0) > 1 + len(extra):
                # someone attached to it between the check above and ours
                raise TunError(errno.EBUSY, f"cannot use interface {actual}: another process is using it")
            created = not (existed and flags & IFF_PERSIST)
            dev = cls(actual, fd, created=created, ctl=ctl)
            dev._queue_fds = extra
            dev._lock = lock
        except BaseException:
            for q in extra:
                os.close(q)
            os.close(fd)
            ctl.close()
            _unlock(lock)
            raise
        try:
            if created:
                set_txqueuelen(actual, TXQUEUELEN)
            if mtu is not None or created:
                dev.set_mtu(mtu or DEFAULT_MTU)
            if addresses:
                dev.add_addresses(addresses)
            if up:
                dev.set_up(True)
        except BaseException:
            dev.close()
            raise
        n = len(dev.queue_fds())
        queued = f", {n} queues" if n > 1 else ""
        if created:
            log.info("created TUN device %s (mtu %d%s)", actual, dev.get_mtu(), queued)
        else:
            log.info(
                "attached to the persistent TUN device %s (mtu %d%s); it stays when vpncrypt stops",
                actual,
                dev.get_mtu(),
                queued,
            )
        return dev

    def queue_fds(self) -> list[int]:
        """The descriptor of every queue, the first one (fileno()) first."""
        return [self.fileno(), *self._queue_fds]

    def fileno(self) -> int:
        if self._fd < 0:
            raise ValueError("TUN device is closed")
        return self._fd

    @property
    def closed(self) -> bool:
        return self._fd < 0

    # -- identity
    def _index_of(self, name: str) -> int:
        return _index(self._ctl, name)

    def _iff(self) -> tuple:
        """(current name, TUN flags) from the descriptor itself (TUNGETIFF),
        wherever the device lives; OSError(EBADFD) once it was deleted."""
        res = fcntl.ioctl(self.fileno(), TUNGETIFF, bytes(40))
        return (res[:IFNAMSIZ].split(b"\0", 1)[0].decode(), struct.unpack_from("H", res, IFNAMSIZ)[0])

    def current_name(self) -> Optional[str]:
        """The interface's name now (it may have been renamed or moved to
        another namespace), or None if it was deleted.  Other errors (no
        memory, ...) raise OSError."""
        try:
            return self._iff()[0]
        except OSError as e:
            if e.errno in _DETACHED:
                return None
            raise

    def gone(self) -> bool:
        """True only when the kernel says the device was deleted (in any
        namespace); a failure to ask is not evidence that it is gone."""
        try:
            return self.current_name() is None
        except OSError:
            return False

    def _namespace_fd(self) -> Optional[int]:
        """A descriptor of the device's namespace when that is not the
        daemon's own (the caller closes it); None when it is, or when the
        kernel cannot tell (before Linux 5.2, or without CAP_NET_ADMIN over
        that namespace, a device is taken to be here)."""
        try:
            fd = fcntl.ioctl(self.fileno(), TUNGETDEVNETNS)
        except OSError as e:
            if e.errno in (errno.ENOTTY, errno.EINVAL, errno.EPERM):
                return None  # cannot tell: taken to be here, as before Linux 5.2
            raise
        try:
            if _ns_key(fd) == self._home:
                os.close(fd)
                return None
        except BaseException:
            os.close(fd)
            raise
        return fd

    def in_home_namespace(self) -> bool:
        """Whether the device is in the namespace the daemon runs in (where
        its routes, addresses and UDP socket are)."""
        fd = self._namespace_fd()
        if fd is None:
            return True
        os.close(fd)
        return False

    def _with_ctl(self, fn):
        """fn(control socket, current name) with a socket in the device's
        namespace: the one held open when the device is here, else one made
        for the call by a thread that joins the device's namespace (no
        socket is kept there: it would keep a deleted namespace alive, and
        the device in it)."""
        name = self._iff()[0]
        fd = self._namespace_fd()
        if fd is None:
            return fn(self._ctl, name)
        try:

            def there():
                with socket.socket(socket.AF_INET, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
                    return fn(s, name)

            return run_in_namespace(fd, there)
        finally:
            os.close(fd)

    # -- packets
    def read(self, size: int = 65535) -> Optional[bytes]:
        """One IP packet, or None if none is waiting."""
        try:
            return os.read(self.fileno(), size)
        except BlockingIOError:
            return None

    def write(self, packet: bytes) -> int:
        return os.write(self.fileno(), packet)

    # -- interface settings (ioctls on a socket in the device's namespace)
    def set_mtu(self, mtu: int) -> None:
        if not 68 <= mtu <= 65535:
            raise ValueError(f"MTU {mtu} out of range (68-65535)")
        try:
            self._with_ctl(lambda ctl, name: fcntl.ioctl(ctl.fileno(), SIOCSIFMTU, _ifreq(name, "i", mtu)))
        except OSError as e:
            raise TunError(e.errno, f"cannot set MTU {mtu} on {self.name}: {e.strerror}") from None

    def get_mtu(self) -> int:
        res = self._with_ctl(lambda ctl, name: fcntl.ioctl(ctl.fileno(), SIOCGIFMTU, _ifreq(name, "i", 0)))
        return struct.unpack_from("i", res, IFNAMSIZ)[0]

    def set_up(self, up: bool = True) -> None:
        def change(ctl, name):
            res = fcntl.ioctl(ctl.fileno(), SIOCGIFFLAGS, _ifreq(name, "h", 0))
            flags = struct.unpack_from("H", res, IFNAMSIZ)[0]
            flags = (flags | IFF_UP) if up else (flags & ~IFF_UP)
            fcntl.ioctl(ctl.fileno(), SIOCSIFFLAGS, _ifreq(name, "H", flags))

        try:
            self._with_ctl(change)
        except OSError as e:
            raise TunError(e.errno, f"cannot bring {self.name} up: {e.strerror}") from None

    def _here(self, what: str) -> None:
        if not self.in_home_namespace():
            raise TunError(
                errno.EXDEV, f"cannot {what} {self.name}: the interface is in another network namespace"
            )

    def addresses(self) -> list:
        """The addresses on the interface now (ip_interface values)."""
        r = subprocess.run(["ip", "-j", "address", "show", "dev", self.name], capture_output=True, text=True)
        if r.returncode != 0:
            raise TunError(errno.EIO, f"`ip address show dev {self.name}` failed: {r.stderr.strip()}")
        out = []
        for link in json.loads(r.stdout or "[]"):
            for a in link.get("addr_info", []):
                out.append(ipaddress.ip_interface(f"{a['local']}/{a['prefixlen']}"))
        return out

    def add_addresses(self, addresses: Iterable) -> None:
        """Add the addresses the interface does not have yet; remember them."""
        self._here("add addresses to")
        present = set(self.addresses())
        for a in addresses:
            iface = ipaddress.ip_interface(a)
            if iface in present:
                continue
            _ip(f"-{iface.version}", "address", "add", str(iface), "dev", self.name)
            self._added.append(iface)
            present.add(iface)

    def remove_addresses(self, addresses: Iterable) -> None:
        self._here("remove addresses from")
        for a in addresses:
            iface = ipaddress.ip_interface(a)
            _ip(f"-{iface.version}", "address", "del", str(iface), "dev", self.name)
            if iface in self._added:
                self._added.remove(iface)

    def set_addresses(self, add: Iterable = (), remove: Iterable = ()) -> None:
        self.remove_addresses(remove)
        self.add_addresses(add)

    def close(self) -> None:
        if self._fd < 0:
            return
        try:
            if self.created:
                self._delete()
            else:
                self._leave()
        finally:
            fd, self._fd = self._fd, -1
            extra, self._queue_fds = self._queue_fds, []
            for q in extra:
                os.close(q)
            os.close(fd)
            self._ctl.close()
            lock, self._lock = self._lock, None
            _unlock(lock)

    def _delete(self) -> None:
        """Delete the device vpncrypt created, wherever it is: by the index
        it has now in its namespace, looked up there by its current name
        (explicitly, in case a child process inherited the fd; a newer
        interface that took our old name or index is never touched).  The
        kernel also deletes a non-persistent device with its last fd."""
        try:
            if self.gone():
                log.info("TUN device %s was already deleted", self.name)
                return
            self._with_ctl(lambda ctl, name: delete_link(_index(ctl, name)))
        except OSError as e:
            if e.errno not in _GONE + _DETACHED:
                log.warning(
                    "cannot delete interface %s: %s (closing its descriptor deletes it)",
                    self.name,
                    e.strerror,
                )
                return
        log.info("removed TUN device %s", self.name)

    def _leave(self) -> None:
        """Leave the persistent device, without the addresses this process
        added (when it is still here: moving it to another namespace drops
        them)."""
        try:
            name = self.current_name()
            here = name is not None and self.in_home_namespace()
        except OSError as e:
            log.warning(
                "cannot tell where the persistent TUN device %s is (%s): the addresses vpncrypt added stay",
                self.name,
                e.strerror,
            )
            return
        if name is None:
            log.info("the persistent TUN device %s was deleted", self.name)
            return
        if not here and self._added:
            log.info(
                "the persistent TUN device %s is in another network namespace: the "
                "addresses vpncrypt added here went with the move",
                name,
            )
        for iface in list(self._added) if here else ():
            r = subprocess.run(
                ["ip", f"-{iface.version}", "address", "del", str(iface), "dev", name],
                capture_output=True,
                text=True,
            )
            if r.returncode != 0:
                log.warning("cannot remove address %s from %s: %s", iface, name, r.stderr.strip())
        self._added.clear()
        log.info("left the persistent TUN device %s in place", name)

    def __enter__(self) -> "TunDevice":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self):
        if getattr(self, "_fd", -1) >= 0:
            for fd in [self._fd, *getattr(self, "_queue_fds", [])]:
                try:
                    os.close(fd)
                except OSError:
                    pass


def _exists(ctl: socket.socket, name: str) -> bool:
    try:
        fcntl.ioctl(ctl.fileno(), SIOCGIFINDEX, _ifreq(name, "i", 0))
    except OSError as e:
        if e.errno in _GONE:
            return False
        raise TunError(e.errno, f"cannot look up interface {name}: {e.strerror}") from None
    return True


def _open_tun_path() -> int:
    try:
        return os.open(TUN_PATH, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise TunError(e.errno, f"cannot open {TUN_PATH}: {e.strerror}") from None


def _setiff(fd: int, name: str, flags: int, vnet_hdr: bool) -> tuple[bytes, int]:
    """TUNSETIFF with `flags` (+ IFF_VNET_HDR if asked, dropped again if
    the kernel refuses it); the answer and the flags that took."""
    if vnet_hdr:
        try:
            return fcntl.ioctl(fd, TUNSETIFF, _ifreq(name, "H", flags | IFF_VNET_HDR)), flags | IFF_VNET_HDR
        except OSError as e:
            if e.errno != errno.EINVAL:
                raise
    return fcntl.ioctl(fd, TUNSETIFF, _ifreq(name, "H", flags)), flags


LOCK_DIR = "/run/vpncrypt"


def _name_lock(name: str) -> Optional[tuple[int, str]]:
    """An exclusive lock on `name` in this network namespace among vpncrypt
    processes (a file under LOCK_DIR, flock'ed until closed or the process
    dies): two daemons started at once for one name would both see no
    device, both attach to the multi-queue device the first created, and
    both give up.  (descriptor, path); TunError (EBUSY) when another holds
    it; None where the folder cannot be made (not root: the kernel's answers
    decide alone).

    A clean stop removes the file (_unlock) while it still holds the lock,
    so a lock taken on a file that was removed meanwhile is no lock: the
    path must still name the locked file, else it is taken again."""
    try:
        os.makedirs(LOCK_DIR, mode=0o700, exist_ok=True)
        netns = os.stat("/proc/thread-self/ns/net").st_ino
    except OSError:
        return None
    path = f"{LOCK_DIR}/tun-{netns}-{name}.lock"
    for _ in range(100):
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise TunError(
                    errno.EBUSY, f"cannot use interface {name}: another process is using it"
                ) from None
            return None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd, path
        os.close(fd)  # removed by the stop of the one that held it: again
    return None


def _unlock(lock: Optional[tuple[int, str]]) -> None:
    """Remove the lock file and let go of it (the lock goes with the
    descriptor; the file goes first, while it is still held)."""
    if lock is not None:
        fd, path = lock
        try:
            os.unlink(path)
        except OSError:
            pass
        os.close(fd)


def _tun_info(name: str) -> Optional[dict]:
    """The kernel's TUN details of device `name` (IFLA_TUN_*: multi_queue,
    numqueues, persist, ...) as `ip -d link` reads them; None where it is no
    TUN device or `ip` cannot tell (then the kernel's answers decide)."""
    try:
        r = subprocess.run(
            ["ip", "-d", "-j", "link", "show", "dev", name], capture_output=True, text=True, timeout=10
        )
        data = (json.loads(r.stdout or "[]") or [{}])[0].get("linkinfo", {})
    except (OSError, ValueError, subprocess.SubprocessError, AttributeError, IndexError):
        return None
    info = data.get("info_data") if data.get("info_kind") == "tun" else None
    return info if isinstance(info, dict) else None


def _held(name: str) -> bool:
    """Whether another process has TUN device `name` open: a device that is
    not persistent lives only while its maker holds it; a persistent one
    has its queues attached."""
    info = _tun_info(name)
    return info is not None and (not info.get("persist") or info.get("numqueues", 0) > 0)


def _attach_first(fd: int, name: str, vnet_hdr: bool, *, multi_queue: bool, existed: bool):
    """The first queue: a new device with IFF_MULTI_QUEUE as asked; an
    existing one must be opened as it was made (the kernel answers EINVAL to
    the other kind), so the other kind is tried too.  (answer, flags)."""
    kinds = [multi_queue, not multi_queue] if existed else [multi_queue]
    for i, mq in enumerate(kinds):
        try:
            return _setiff(fd, name, IFF_TUN | IFF_NO_PI | (IFF_MULTI_QUEUE if mq else 0), vnet_hdr)
        except OSError as e:
            if e.errno != errno.EINVAL or i == len(kinds) - 1:
                raise
    raise AssertionError("unreachable")


def _index(ctl: socket.socket, name: str) -> int:
    res = fcntl.ioctl(ctl.fileno(), SIOCGIFINDEX, _ifreq(name, "i", 0))
    return struct.unpack_from("i", res, IFNAMSIZ)[0]


def _ns_key(ns) -> tuple:
    """What identifies a network namespace (a path or a descriptor of it)."""
    st = os.stat(ns)
    return (st.st_dev, st.st_ino)


def _setns(fd: int) -> None:
    if hasattr(os, "setns"):  # Python 3.12
        os.setns(fd, CLONE_NEWNET)
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def run_in_namespace(ns_fd: int, fn: Callable[[], T]) -> T:
    """fn() in a short-lived thread that joined the network namespace
    `ns_fd`: the sockets it makes belong to that namespace (the process and
    its other threads stay where they are).  Its result, or its exception."""
    out = []

    def there():
        try:
            _setns(ns_fd)
            out.append((True, fn()))
        except BaseException as e:  # noqa: BLE001 - raised in the caller
            out.append((False, e))

    t = threading.Thread(target=there, name="vpncrypt-netns", daemon=True)
    t.start()
    t.join()
    ok, value = out[0]
    if not ok:
        raise value
    return value


def delete_link(ifindex: int) -> None:
    """Delete the interface with index `ifindex` (rtnetlink RTM_DELLINK).
    Raises OSError with the kernel's errno."""
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, socket.NETLINK_ROUTE) as nl:
        nl.bind((0, 0))
        body = struct.pack("=BxHiII", socket.AF_UNSPEC, 0, ifindex, 0, 0)  # struct ifinfomsg
        hdr = struct.pack("=IHHII", 16 + len(body), RTM_DELLINK, NLM_F_REQUEST | NLM_F_ACK, 1, 0)
        nl.sendto(hdr + body, (0, 0))
        while True:
            data = nl.recv(65536)
            off = 0
            while off + 16 <= len(data):
                length, kind, _flags, seq, _pid = struct.unpack_from("=IHHII", data, off)
                if kind == NLMSG_ERROR and seq == 1:
                    (code,) = struct.unpack_from("=i", data, off + 16)
                    if code:
                        raise OSError(-code, os.strerror(-code))
                    return
                off += (length + 3) & ~3


def create_tun(
    name: str, *, mtu: Optional[int] = DEFAULT_MTU, addresses: Iterable = (), up: bool = True
) -> TunDevice:
    return TunDevice.create(name, mtu=mtu, addresses=addresses, up=up)
