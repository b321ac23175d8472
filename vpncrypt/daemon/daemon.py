"""The vpncrypt daemon: config + UDP socket + TUN + data plane + UAPI server +
routes + sd_notify, on one asyncio (uvloop) event loop.

    daemon = Daemon("wg0", config_path="/etc/vpncrypt/wg0.conf")
    exit_code = run_daemon(daemon)          # blocks until SIGTERM/SIGINT

Startup, in an order that leaves nothing behind when a step fails: catch
SIGTERM/SIGINT/SIGHUP (before anything on the host changes), read the
config (a config error touches nothing), open the UDP socket (dual-stack
IPv6, or IPv4; with N queues, N sockets of one SO_REUSEPORT group on one
port), look up the endpoints' host names (in a thread, for at most
START_WAIT seconds), create the TUN device or attach to a persistent one
(with N queues, a multi-queue one: a descriptor per queue), add its Address
lines, apply the peers, remove what an earlier run left behind and add the
routes and the fwmark, and only then start the data plane (data_plane.py:
nothing leaves the UDP socket before the host's routes are in place, or a
restart onto a persistent TUN would send its first initiation into the
earlier run's dead default route), serve the UAPI on
/var/run/wireguard/IFACE.sock, serve the metrics if asked (metrics.py; a
port that cannot be bound fails the start), then send READY=1.  A SIGTERM during startup undoes what was
done so far and exits 0; a SIGHUP then is a reload once the daemon is up.

An Endpoint host name that cannot be resolved does not fail the start (nor
a reload): the peer is there without an endpoint, the others work, and the
name is looked up again in the background until it resolves; a resolved
name is looked up again while the peer's handshake fails, and the peer
follows a new address (endpoint_names.py says when and what; the lookups
run in threads here).  An `endpoint=` set over the UAPI (`wg set`, `wg
syncconf`) replaces the name: it is no longer followed, until a reload
applies the file's Endpoint again.

SIGHUP re-reads the config and applies it as `wg syncconf` would (sessions
of unchanged peers survive).  Host names are resolved in a thread, so that a
slow resolver stalls neither the tunnel nor the UAPI, for LOOKUP_LIMIT (30 s)
at most: a lookup that hangs is abandoned, and its names followed in the
background, so it holds up no reload; reloads run one at a
time (a SIGHUP during one makes one more, afterwards).  SIGTERM/SIGINT undo
what startup did and exit 0.

The interface may be moved to another network namespace and back (`ip link
set IFACE netns NS`): the UDP socket stays here, and the MTU set there is
followed (tun.py).  If the interface is deleted, in whichever namespace it
is (`ip link del`, `wg-quick down`), the daemon cleans up and exits 0 (an
orderly stop, as wireguard-go); if the data plane fails, it exits 1.

A startup failure is one line on stderr (``FILE:LINE: [Section] Key:
reason`` for config errors) and exit status 1.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import logging
import os
import signal
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Generic, Optional, TypeVar

from ..config import Config, ConfigError, SetAddresses, extras_operations, load_config, syncconf_operations
from ..config.keytypes import fingerprint
from ..endpoints import Endpoint, format_endpoint, resolve_endpoint
from ..protocol.timers import ProtocolConfig
from . import notify
from .endpoint_names import LOOKUP_LIMIT, EndpointNames, Found, NoAnswer, Outcome
from .counter_snapshot import CounterSnapshot
from .data_plane import DataPlane
from .device_control import DeviceControl
from .control import ControlError
from .logsetup import report_failure
from .routes import Routes
from .tun import TunDevice
from .udpsocket import open_udp_sockets, set_fwmark
from .uapi import (
    DEFAULT_SOCKET_DIR,
    UAPIServer,
    apply_operations,
    clear_stale_socket,
    socket_path,
    start_uapi_server,
)

if TYPE_CHECKING:  # loaded with --metrics only
    from .metrics import MetricsServer, MetricsSettings

log = logging.getLogger("vpncrypt.daemon")

_T = TypeVar("_T")


class _Started(Generic[_T]):
    """A part of the daemon that start() makes (the attribute `name`), for
    the steps that run after it: RuntimeError if start() has not made it."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __get__(self, daemon: object, owner: Optional[type] = None) -> _T:
        part = getattr(daemon, self.name)
        if part is None:
            raise RuntimeError(f"the daemon's {self.name} is not there: start() has not made it")
        return part


TICK = 1.0  # seconds between housekeeping rounds (interface check, MTU, STATUS=)
# The start waits this long for the Endpoint names' first lookups: glibc's
# resolver gives up on a server after 5 s (resolv.conf's default timeout),
# so a resolver that answers at all has answered by then; one that does not
# holds up no more than this, and its answers are applied when they come.
START_WAIT = 5.0
NAMES_CHECK = 1.0  # seconds between looks at the named peers' handshakes and due lookups
# Name lookups (threads) under way at once, in the background; one that has
# not answered within LOOKUP_LIMIT (30 s) gives its place back (its thread is
# left to end, and no other lookup of its name starts until it has).
MAX_LOOKUPS = 4


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StartupError(Exception):
    """Startup failed; the message is one line meant for the user."""


class DeletedDuringStartup(Exception):
    """The interface was deleted while the start set it up (`ip link del`
    then): an orderly stop, as a deletion once up is (Daemon._deleted)."""


class StoppedDuringStartup(Exception):
    """SIGTERM/SIGINT arrived while starting: undo what was done, exit 0."""


def describe(e: BaseException) -> str:
    """An exception as words for the user: an OSError's text without its
    `[Errno N]` prefix."""
    if isinstance(e, OSError) and e.strerror:
        return f"{e.filename}: {e.strerror}" if e.filename else e.strerror
    return str(e)


class Daemon:
    def __init__(
        self,
        interface: str,
        config_path: Optional[str] = None,
        *,
        socket_dir: str = DEFAULT_SOCKET_DIR,
        protocol_config: Optional[ProtocolConfig] = None,
        on_ready: Optional[Callable[[], None]] = None,
        threads: int = 1,
        tun_offloads: bool = True,
        metrics_address: Optional[MetricsSettings] = None,
        queues: int = 1,
        queue_fallback: bool = False,
        fair_queue: bool = False,
    ):
        self.interface = interface
        # (UDP socket, TUN queue) pairs; queue_fallback: a persistent TUN made
        # without multi_queue gets one (else it is a startup error)
        self.queues = queues
        self.queue_fallback = queue_fallback
        self.metrics_address = metrics_address  # where and how, checked; None: no metrics
        self.metrics: Optional[MetricsServer] = None
        self.threads = threads
        self.tun_offloads = tun_offloads
        self.fair_queue = fair_queue
        self.config_path = config_path
        self.socket_dir = socket_dir
        self.protocol_config = protocol_config
        self.on_ready = on_ready
        self.config: Config = Config()
        self.tun: Optional[TunDevice] = None
        self.udp: Any = None  # the data plane's (first) batch socket (DataPlane.udp_socket)
        self.udps: list = []  # every queue's batch socket, self.udp first
        self.dataplane: Optional[DataPlane] = None
        self.uapi: Optional[UAPIServer] = None
        self.routes: Optional[Routes] = None
        self.control = DeviceControl(self)
        self.listen_port = 0
        self.fwmark = 0
        self.v6 = True
        self.mtu = 0
        self.exit_code = 0
        self.up = False
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self._stop = asyncio.Event()
        self._status: Optional[str] = None
        self._timers: dict[str, asyncio.TimerHandle] = {}  # purpose -> the one pending TimerHandle
        self._early: dict[int, Any] = {}  # signal -> what it was set to before start() caught it
        self._early_stop = ""  # the stop signal that arrived during startup
        self._early_reload = False
        self._reload_lock = asyncio.Lock()
        self._reload_waiting = False
        self._tasks: set = set()
        self._home = True  # whether the interface is in the daemon's namespace
        pc = protocol_config or ProtocolConfig()
        # the peers' Endpoint names (on the loop's clock); a handshake is
        # failing once an initiation had no answer for REKEY_TIMEOUT + jitter
        self.names = EndpointNames(pc.rekey_timeout + pc.rekey_timeout_jitter)
        self._lookups: dict = {}  # host name -> its background lookup, while it holds a place
        self._resolving: dict = {}  # host name -> lookup threads asking for it now (abandoned ones too)
        self._resolving_lock = threading.Lock()
        self._mtu_unknown = False  # warned that the MTU cannot be read where it is

    # ------------------------------------------------------------ helpers

    # What start() made, for the steps that run only after it made them.
    _loop: _Started[asyncio.AbstractEventLoop] = _Started("loop")
    _dp: _Started[DataPlane] = _Started("dataplane")
    _tun: _Started[TunDevice] = _Started("tun")
    _routes: _Started[Routes] = _Started("routes")
    _uapi: _Started[UAPIServer] = _Started("uapi")
    _udp: _Started[Any] = _Started("udp")

    @property
    def device(self):
        return self.dataplane.device if self.dataplane is not None else None

    @property
    def engine(self):
        return self.dataplane.engine if self.dataplane is not None else None

    def changed(self) -> None:
        if self.dataplane is not None:
            self.dataplane.changed()

    def endpoint_set(self, public_key: bytes, endpoint) -> None:
        """A peer's endpoint set by the file or the UAPI (for the debug trace).
        Its name, if it had one, is no longer followed (the start and a
        reload follow the file's names again after applying it)."""
        self.names.forget(bytes(public_key))
        if self.dataplane is not None:
            self.dataplane.trace.endpoint_set(public_key, endpoint)

    def counters(self, peer_drops: bool = True) -> CounterSnapshot:
        return self._dp.counters(
            self.udp, loop=self.loop, pending_timers=len(self._timers), peer_drops=peer_drops
        )

    def rebind(self, port: int) -> None:
        """Every queue's socket to `port` (0: a random one, the same for
        all), together; the old ones closed once the new ones are in."""
        if port and port == self.listen_port:
            return
        socks = self._outer_sockets(port, max(1, len(self.udps)))
        old = self.udps
        self._use_sockets(socks)
        self._dp.replace_udp(self.udps)
        for u in old:
            u.sock.close()
        log.info("listening on UDP port %d (%s)", self.listen_port, "IPv4+IPv6" if self.v6 else "IPv4 only")

    def _outer_sockets(self, port: int, count: int) -> list:
        """`count` new UDP sockets on `port` for rebind() (`vpncrypt proxy`
        makes them in the namespace it started in)."""
        return open_udp_sockets(port, self.fwmark, count=count)

    def _use_sockets(self, socks: list) -> None:
        self.udps = self._dp.udp_sockets(socks)
        self.udp = self.udps[0]
        self.v6 = socks[0].family == socket.AF_INET6
        self.listen_port = socks[0].getsockname()[1]
        self._dp.set_listen_port(self.listen_port)

    def set_fwmark(self, fwmark: int) -> None:
        """On every queue's socket, or (if one refuses it) on none."""
        done = []
        try:
            for u in self.udps or [self._udp]:
                set_fwmark(u.sock, fwmark)
                done.append(u)
        except OSError:
            for u in done:
                set_fwmark(u.sock, self.fwmark)
            raise
        self.fwmark = fwmark

    def check_mtu(self) -> None:
        try:
            mtu = self._tun.get_mtu()  # wherever the interface is
        except OSError as e:
            if not self._home and not self._mtu_unknown:
                # joining the other namespace takes CAP_SYS_ADMIN and setns,
                # which the systemd unit does not grant
                log.warning(
                    "cannot read the MTU of %s in its network namespace (%s): packets stay padded to MTU %d",
                    self._tun.name,
                    describe(e),
                    self.mtu,
                )
                self._mtu_unknown = True
            return
        self._mtu_unknown = False
        if mtu != self.mtu:
            if self.mtu:
                log.info("interface %s: MTU %d -> %d", self.interface, self.mtu, mtu)
            self.mtu = mtu
            self._dp.set_mtu(mtu)

    def _status_text(self) -> str:
        n = self._dp.peer_count()
        last = self._dp.last_handshake()
        text = f"{n} peer{'s' if n != 1 else ''}"
        if last:
            text += ", last handshake " + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(last))
        else:
            text += ", no handshake yet"
        return text

    # ------------------------------------------------------------ startup

    def _read_config(self) -> Config:
        """The config file, parsed (ConfigError otherwise).  No side effects."""
        if self.config_path is None:
            return Config()
        cfg = load_config(self.config_path)
        for w in cfg.warnings:
            log.warning("%s", w)
        return cfg

    def _with_addresses(self, cfg: Config, found: dict) -> Config:
        """`cfg` with every peer's Endpoint as the address to apply: a
        numeric one checked (ConfigError naming its line otherwise: IPv6 is
        there, a zone names an interface), a host name's (checked: labels
        DNS can carry) the address `found` for it, or none yet (not found,
        or still being looked up).  Looks nothing up."""
        peers = []
        for p in cfg.peers:
            ep = p.endpoint
            if ep is not None:
                try:
                    if ep.is_numeric:
                        addr: Optional[tuple] = resolve_endpoint(ep, v6=self.v6)
                    else:
                        _check_name(ep.host)
                        got = found.get(ep.host)
                        addr = (got[0], ep.port, *got[2:]) if isinstance(got, tuple) else None
                except OSError as e:
                    line = p.line_of("Endpoint")
                    raise ConfigError(
                        f"{cfg.path}:{line}: [Peer] Endpoint: {describe(e)}", path=cfg.path, line=line
                    ) from None
                p = dataclasses.replace(p, endpoint=_as_endpoint(addr, ep) if addr is not None else None)
            peers.append(p)
        return dataclasses.replace(cfg, peers=tuple(peers))

    @staticmethod
    def _names_of(cfg: Config) -> list:
        """The Endpoints of `cfg` that name a host, one per host name."""
        seen: dict = {}
        for p in cfg.peers:
            ep = p.endpoint
            if ep is not None and not ep.is_numeric:
                seen.setdefault(ep.host, ep)
        return list(seen.values())

    def _look_up(self, names: list, found: dict, stop: Optional[threading.Event] = None) -> dict:
        """Each name's address, or the OSError that says why there is none,
        into `found` (host -> either) as they come, one after the other,
        until `stop` is set.  Blocks on the resolver: called in a thread."""
        for ep in names:
            if stop is not None and stop.is_set():
                break
            self._count_resolving(ep.host, 1)
            try:
                found[ep.host] = resolve_endpoint(ep, v6=self.v6)
            except OSError as e:
                found[ep.host] = e
            except Exception as e:  # noqa: BLE001 - whatever the resolver raises, the name has an answer
                found[ep.host] = OSError(errno.EINVAL, f"cannot resolve {ep.host}: {e}")
            finally:
                self._count_resolving(ep.host, -1)
        return found

    def _count_resolving(self, host: str, step: int) -> None:
        """A lookup thread starts (+1) or ends (-1) asking for `host`: the
        background round starts none for a host that one still asks for
        (one that hangs is left alone, not joined by more)."""
        with self._resolving_lock:
            n = self._resolving.get(host, 0) + step
            if n > 0:
                self._resolving[host] = n
            else:
                self._resolving.pop(host, None)

    async def _look_up_at_start(self, cfg: Config) -> tuple:
        """The names' lookups in a thread, nothing on the host changed yet:
        (what they found within START_WAIT, the lookups' task if they are
        still under way).  A stop (`systemctl stop` while a resolver takes
        its time) ends the wait at once."""
        names = self._names_of(cfg)
        if not names:
            return {}, None
        found: dict = {}
        task = asyncio.ensure_future(self._in_thread(self._look_up, names, found))
        deadline = self._loop.time() + START_WAIT
        while not task.done() and self._loop.time() < deadline:
            await asyncio.wait({task}, timeout=0.05)
            if self._early_stop:
                task.cancel()  # the thread's answer, if it ever comes, is dropped
                self._checkpoint()
        if task.done():
            return found, None
        log.warning(
            "endpoint names not resolved within %g s; %s up meanwhile, their peers get their "
            "endpoints when the names resolve",
            START_WAIT,
            self.interface,
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return dict(found), task

    # ------------------------------------------------------------ names

    def _track_names(self, cfg: Config, found: dict, asked_at: float, later=None) -> None:
        """After the file `cfg` is applied: follow its peers' Endpoint names
        (their lookups were asked at `asked_at`; `found` has the answers,
        `later` is the lookups' task if some are still under way) and no
        other peer's."""
        now = self._loop.time()
        dev = self._dp.device
        named = set()
        for p in cfg.peers:
            ep, pk = p.endpoint, bytes(p.public_key)
            peer = dev.peers.get(pk)
            if ep is None or ep.is_numeric or peer is None:
                continue
            named.add(pk)
            c = peer.counters
            where = f"{cfg.path}:{p.line_of('Endpoint')}"
            outcome = self.names.track(
                pk, ep, where, asked_at, now, (c.handshakes_sent, c.handshakes_completed), found.get(ep.host)
            )
            self._names_apply(pk, outcome)
        for pk in [k for k in self.names.names if k not in named]:
            self.names.forget(pk)
        if later is not None:
            later.add_done_callback(lambda task: self._names_late(task, asked_at))
        if self.up:  # (the start's own round begins once it is up)
            self._schedule_names()

    def _names_late(self, task: asyncio.Future, asked_at: float) -> None:
        """The start's lookups that came after START_WAIT: their answers."""
        if task.cancelled() or task.exception() is not None or self._stop.is_set():
            return
        found = task.result()
        now = self._loop.time()
        for pk, name in list(self.names.names.items()):
            got = found.get(name.endpoint.host)
            if got is not None and name.asking:  # (those answered in time are done)
                self._names_apply(pk, self.names.answered(pk, asked_at, now, got))

    def _names_apply(self, pk: bytes, outcome: Optional[Outcome]) -> None:
        """What an answer means for the peer: a line logged, and an address
        set (unless it has it already)."""
        if outcome is None:
            return
        if outcome.message:
            log.log(outcome.level, "%s", outcome.message)
        addr = outcome.address
        dev = self.device
        peer = dev.peers.get(pk) if dev is not None else None
        if addr is None or peer is None or format_endpoint(peer.endpoint) == format_endpoint(addr):
            return
        try:
            dev.update_peer(pk, endpoint=addr)
        except (OSError, ValueError) as e:
            log.warning("peer %s: cannot use the endpoint %s: %s", fingerprint(pk), format_endpoint(addr), e)
            return
        log.info("peer %s: endpoint set to %s (its Endpoint name)", fingerprint(pk), format_endpoint(addr))
        self._dp.trace.endpoint_set(pk, peer.endpoint)  # not self.endpoint_set: the name stays followed
        self.changed()

    def _schedule_names(self) -> None:
        """The names' round, while there are names to follow (a config
        without any has no such timer)."""
        if self.names and "names" not in self._timers:
            self._timers["names"] = self._loop.call_later(NAMES_CHECK, self._names_tick)

    def _names_tick(self) -> None:
        """About once a second: the named peers' handshakes (is one failing?),
        the lookups that have not answered within LOOKUP_LIMIT (abandoned),
        and the lookups that are due, in threads (MAX_LOOKUPS at a time)."""
        self._timers.pop("names", None)
        if self._stop.is_set():
            return
        now = self._loop.time()
        dev = self._dp.device
        table_now = dev.table.clock(time.monotonic())
        for pk in list(self.names.names):
            peer = dev.peers.get(pk)
            if peer is None:
                self.names.forget(pk)
                continue
            c = peer.counters
            received = peer.stats(table_now).rx_wire_bytes
            self.names.watch(pk, now, c.handshakes_sent, c.handshakes_completed, received)
        for pk in self.names.overdue(now):
            self._lookups.pop(self.names.names[pk].endpoint.host, None)  # its place is given back
            self._names_apply(pk, self.names.abandon(pk, now))
        by_host: dict = {}
        for pk in self.names.due(now):
            by_host.setdefault(self.names.names[pk].endpoint.host, []).append(pk)
        for host, keys in by_host.items():
            if host in self._resolving:  # an abandoned lookup of it still hangs: wait for it to end
                continue
            if len(self._lookups) >= MAX_LOOKUPS:
                break
            for pk in keys:
                self.names.asking(pk, now)
            # its place taken now, not when the task first runs: all due in one
            # round would start at once otherwise
            place = self._lookups[host] = object()
            ep = self.names.names[keys[0]].endpoint
            task = self._loop.create_task(self._names_lookup(ep, keys, now, place))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        self._schedule_names()

    async def _names_lookup(self, ep: Endpoint, keys: list, asked_at: float, place: object) -> None:
        """One background lookup, for the peers `keys` that share the name;
        an answer after the round abandoned it is dropped by self.names."""
        try:
            found: Found = (await self._in_thread(self._look_up, [ep], {}))[ep.host]
        finally:
            if self._lookups.get(ep.host) is place:
                del self._lookups[ep.host]
        now = self._loop.time()
        for pk in keys:
            self._names_apply(pk, self.names.answered(pk, asked_at, now, found))

    def endpoint_name_rows(self) -> list:
        """Every followed name as a dict for the reports: public key (bytes),
        name, state, Unix times of the last resolution and of the next
        lookup (None: never / none wanted)."""
        mono, wall = self._loop.time() if self.loop is not None else 0.0, time.time()

        def unix(t):
            return None if t is None else wall - (mono - t)

        return [
            {"public_key": pk, "name": name, "state": state, "resolved": unix(at), "next_try": unix(nxt)}
            for pk, name, state, at, nxt in self.names.rows()
        ]

    def endpoint_name_lines(self) -> list:
        """The rows as the get=vpncrypt extension's vpncrypt_endpoint_name=
        values: "PUBLIC_KEY_HEX STATE RESOLVED NEXT_TRY NAME" (times in
        whole Unix seconds, 0 for none)."""
        return [
            f"{r['public_key'].hex()} {r['state']} {int(r['resolved'] or 0)} "
            f"{int(r['next_try'] or 0)} {r['name']}"
            for r in self.endpoint_name_rows()
        ]

    async def _in_thread(self, fn, *args):
        """fn(*args) in a thread of its own (a daemon thread: a resolver that
        hangs does not hold up the exit); its result on the loop."""
        loop = self._loop
        fut = loop.create_future()

        def settle(ok, value):
            if not fut.done():
                (fut.set_result if ok else fut.set_exception)(value)

        def work():
            try:
                ok, value = True, fn(*args)
            except BaseException as e:  # noqa: BLE001 - raised on the loop
                ok, value = False, e
            try:
                loop.call_soon_threadsafe(settle, ok, value)
            except RuntimeError:  # the loop is closed: nobody waits
                pass

        threading.Thread(target=work, name="vpncrypt-resolve", daemon=True).start()
        return await fut

    def _open_socket(self, cfg: Config) -> None:
        port = cfg.interface.listen_port or 0
        try:
            socks = open_udp_sockets(port, self.fwmark, count=self.queues)
        except OSError as e:
            line = cfg.interface.line_of("ListenPort")
            if line:
                raise ConfigError(
                    f"{cfg.path}:{line}: [Interface] ListenPort: {describe(e)}", path=cfg.path, line=line
                ) from None
            raise StartupError(describe(e)) from None
        self._use_sockets(socks)
        log.debug("listening on UDP port %d (%s)", self.listen_port, "IPv4+IPv6" if self.v6 else "IPv4 only")

    # Signals during startup: a Python handler that only takes note (it may
    # run at any point); the steps check between them, so a step that
    # changed the host is always complete and undone by close().
    def _catch_signals_early(self) -> None:
        for sig in (*STOP_SIGNALS, signal.SIGHUP):
            self._early.setdefault(sig, signal.getsignal(sig))
            signal.signal(sig, self._early_signal)

    def _early_signal(self, signum, _frame) -> None:
        if signum == signal.SIGHUP:
            self._early_reload = True
        elif not self._early_stop:
            self._early_stop = signal.Signals(signum).name

    def _checkpoint(self) -> None:
        if self._early_stop:
            raise StoppedDuringStartup(self._early_stop)

    def _restore_signals(self) -> None:
        for sig, handler in self._early.items():
            try:
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
            except (ValueError, TypeError, OSError):
                pass
        self._early.clear()

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._catch_signals_early()
        cfg = self._read_config()
        self._make_dataplane(cfg)
        self._open_socket(cfg)
        self._with_addresses(cfg, {})  # the numeric Endpoints checked before any lookup
        asked_at = self._loop.time()
        found, later = await self._look_up_at_start(cfg)
        self._checkpoint()
        self._not_served_already()
        self._make_tun(cfg)
        self._checkpoint()
        self.config = self._with_addresses(cfg, found)
        apply_operations(syncconf_operations(self.control.snapshot(), self.config), self.control)
        self._track_names(cfg, found, asked_at, later)
        # the host's routes and the socket's fwmark before the data plane
        # sends anything (see the module's docstring)
        self.routes = Routes(
            self._tun.name, cfg.interface.table, get_fwmark=lambda: self.fwmark, set_fwmark=self.set_fwmark
        )
        self._host_step(self._routes.remove_leftovers)
        self._checkpoint()
        self._host_step(self._routes.sync, self._dp.allowed_ips())
        self._checkpoint()
        self._dp.start(
            self.udps, self._tun.queue_fds(), loop=self.loop, mtu=self.mtu, on_fatal=self._on_fatal
        )
        self._checkpoint()
        self.uapi = await start_uapi_server(
            socket_path(self._tun.name, self.socket_dir), self.control, extensions_in_get=False
        )
        self._checkpoint()
        if self.metrics_address is not None:
            await self._start_metrics(self.metrics_address)
            self._checkpoint()
        self._running()

    def _not_served_already(self) -> None:
        """StartupError if a live daemon serves this interface's UAPI socket:
        asked before the TUN is made and the routes are touched (they come
        before the UAPI server, so a second daemon attached to a multi-queue
        TUN removed the first one's routes, then failed to bind its socket,
        then removed the routes it had added: the first daemon's)."""
        path = socket_path(self.interface, self.socket_dir)
        try:
            clear_stale_socket(path)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise StartupError(
                    f"cannot start {self.interface}: another daemon serves it ({path} answers)"
                ) from None
            raise StartupError(f"cannot start {self.interface}: {describe(e)}") from None

    def _make_dataplane(self, cfg: Config) -> None:
        iface = cfg.interface
        self.fwmark = iface.fwmark or 0
        self.dataplane = DataPlane(
            bytes(iface.private_key) if iface.private_key is not None else None,
            protocol_config=self.protocol_config,
            threads=self.threads,
            tun_offloads=self.tun_offloads,
            fair_queue=self.fair_queue,
        )
        if self.protocol_config is not None:
            changed = _protocol_changes(self.protocol_config)
            if changed:
                log.warning("protocol timers and limits other than WireGuard's: %s", changed)

    def _make_tun(self, cfg: Config) -> None:
        iface = cfg.interface
        # the addresses and the link's state set here, not by create(): a
        # step that fails on a TUN deleted meanwhile is then told apart
        self.tun = TunDevice.create(
            self.interface,
            mtu=iface.mtu if iface.mtu else None,
            addresses=(),
            up=False,
            vnet_hdr=True,
            queues=len(self.udps),
            queue_fallback=self.queue_fallback,
        )
        if iface.addresses:
            self._host_step(self._tun.add_addresses, iface.addresses)
        self._host_step(self._tun.set_up, True)
        queues = len(self._tun.queue_fds())
        if queues < len(self.udps):  # a persistent TUN of one queue (queue_fallback)
            for u in self.udps[queues:]:
                u.sock.close()
            del self.udps[queues:]
        self.mtu = self._tun.get_mtu()
        if iface.addresses:
            log.info("interface %s: addresses %s", self._tun.name, ", ".join(str(a) for a in iface.addresses))

    def _host_step(self, step, *args) -> None:
        """step(*args), a change of the host's interface or routes during the
        start: its failure on a TUN that is gone is the interface deleted
        (an orderly stop), not a failed start."""
        try:
            step(*args)
        except OSError:
            if self.tun is not None and self.tun.gone():
                raise DeletedDuringStartup(self.tun.name) from None
            raise

    def _running(self) -> None:
        """The end of the start: the loop's signal handlers, the timers, READY=1."""
        for sig in STOP_SIGNALS:
            self._loop.add_signal_handler(sig, self.stop, 0, signal.Signals(sig).name)
        self._loop.add_signal_handler(signal.SIGHUP, self.reload)
        self._checkpoint()  # one that came while the loop's handlers went in
        self._schedule_tick()
        self._schedule_names()
        wd = notify.watchdog_interval()
        if wd:
            self._schedule_watchdog(wd)
        self._status = self._status_text()
        self.up = True
        log.info("%s up: %s, UDP port %d, MTU %d", self._tun.name, self._status, self.listen_port, self.mtu)
        notify.ready(self._status)
        if self.on_ready is not None:
            self.on_ready()
        if self._early_reload:
            log.info("SIGHUP during startup: reloading %s", self.config_path)
            self.reload()

    async def _start_metrics(self, settings: MetricsSettings) -> None:
        from .metrics import start_metrics_server
        from .unixlisten import UnixListenError

        try:
            self.metrics = await start_metrics_server(self, settings)
        except UnixListenError as e:  # its words name the path
            raise StartupError(f"--metrics {settings.address}: cannot listen: {e.strerror}") from None
        except OSError as e:  # (asyncio's text repeats the address and the errno)
            why = os.strerror(e.errno) if e.errno else describe(e)
            raise StartupError(f"--metrics {settings.address}: cannot listen: {why}") from None

    # ------------------------------------------------------------ running

    def _schedule_tick(self) -> None:
        self._timers["tick"] = self._loop.call_later(TICK, self._tick)

    def _tick(self) -> None:
        if self._stop.is_set():
            return
        if self._tun.gone():
            self._deleted()
            return
        self._check_namespace()
        self.check_mtu()
        self._dp.report_routing_loops()
        text = self._status_text()
        if text != self._status:
            self._status = text
            notify.status(text)
        self._schedule_tick()

    def _schedule_watchdog(self, interval: float) -> None:
        def ping():
            if self._stop.is_set():
                return
            notify.watchdog()
            self._timers["watchdog"] = self._loop.call_later(interval, ping)

        ping()

    def _check_namespace(self) -> None:
        try:
            home = self._tun.in_home_namespace()
        except OSError:
            return  # cannot tell now: nothing to say
        if home != self._home:
            self._home = home
            if home:
                log.info(
                    "interface %s is back in the daemon's network namespace (the moves "
                    "dropped its addresses and routes)",
                    self._tun.name,
                )
            else:
                log.info(
                    "interface %s moved to another network namespace; its UDP socket stays in this one",
                    self._tun.name,
                )

    def _on_fatal(self, exc) -> None:
        """The data plane stopped on `exc`: an orderly stop if the TUN was
        deleted (a read on it then fails with EBADFD), else a failure."""
        if self._tun.gone():
            self._deleted()
            return
        log.error("data plane failed (%s); shutting down", describe(exc))
        self.stop(1)

    def _deleted(self) -> None:
        """The interface was deleted (`ip link del`, `wg-quick down`): what an
        operator does to stop a tunnel, so one INFO line and exit status 0,
        as wireguard-go (0.0.20250522 exits 0 and logs no error then).  A
        unit with Restart=on-failure (systemd/vpncrypt@.service) thus stays
        stopped; exit 1 would have it start again, making the interface anew."""
        if not self._stop.is_set():
            log.info("interface %s was deleted; stopping", self._tun.name)
        self.stop(0)

    def stop(self, code: int = 0, why: str = "") -> None:
        if why:
            log.info("received %s; shutting down", why)
        if not self._stop.is_set():
            self.exit_code = code
            self._stop.set()

    def reload(self) -> None:
        """SIGHUP: the file against the running state, as `wg syncconf`, plus
        the wg-quick extras and routes; one reload at a time (one that is
        still waiting to start reads the file then, so a second SIGHUP meanwhile
        adds nothing)."""
        if self.config_path is None:
            log.warning("SIGHUP: no config file to reload (configure through the UAPI)")
            return
        if self._reload_waiting:
            return
        self._reload_waiting = True
        task = self._loop.create_task(self._reload_in_turn())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _reload_in_turn(self) -> None:
        async with self._reload_lock:
            self._reload_waiting = False
            if not self._stop.is_set():
                await self._reload()

    async def _reload(self) -> None:
        notify.reloading()
        try:
            read = self._read_config()
            self._with_addresses(read, {})  # the numeric Endpoints checked before any lookup
            asked_at = self._loop.time()
            # the loop keeps serving meanwhile; a name not found does not fail
            # the reload: its peer keeps the endpoint it has, and the name is
            # looked up again in the background
            found = await self._look_up_for_reload(self._names_of(read))
            if self._stop.is_set():
                return
            new = self._with_addresses(read, found)
            # held apart from UAPI requests: a set applied in slices is never
            # met halfway, and a get never shows half a reload
            extras = extras_operations(self.config, new)
            if any(isinstance(op, SetAddresses) for op in extras) and not self._tun.in_home_namespace():
                # (checked before anything is applied: a request is whole or nothing)
                log.warning(
                    "reload: %s is in another network namespace; its Address lines "
                    "are for that namespace to set",
                    self._tun.name,
                )
                extras = [op for op in extras if not isinstance(op, SetAddresses)]
            async with self._uapi.exclusive():
                ops = syncconf_operations(self.control.snapshot(), new)
                apply_operations(ops + extras, self.control)
            self.config = new
            self._track_names(read, found, asked_at)
            if new.interface.table != self._routes.table:
                log.warning("reload: a changed Table takes effect at the next start")
            if self._tun.in_home_namespace():
                self._routes.sync(self._dp.allowed_ips())
            else:
                log.warning(
                    "reload: %s is in another network namespace; its routes are for that namespace to set",
                    self._tun.name,
                )
            log.info("reloaded %s like `wg syncconf`: %d peer(s)", self.config_path, self._dp.peer_count())
        except (ConfigError, ControlError, OSError, ValueError) as e:
            log.error("reload failed, keeping the running configuration: %s", describe(e))
        finally:
            if not self._stop.is_set():
                self.changed()
                self._status = self._status_text()
                notify.ready(self._status)

    async def _look_up_for_reload(self, names: list) -> dict:
        """The names' lookups, in a thread, for LOOKUP_LIMIT at most: a
        lookup that hangs holds up neither this reload nor the ones after
        it.  The names without an answer by then get NoAnswer (followed in
        the background, as a name not found); the thread asks for no more
        names after the one it is on, and its answers are dropped.  A name
        that an earlier lookup still asks for (one that hangs) is not asked
        again: NoAnswer at once, so hung threads stay one per name."""
        found: dict = {ep.host: NoAnswer() for ep in names if ep.host in self._resolving}
        names = [ep for ep in names if ep.host not in found]
        if not names:
            return found
        stop = threading.Event()
        task = asyncio.ensure_future(self._in_thread(self._look_up, names, found, stop))
        await asyncio.wait({task}, timeout=LOOKUP_LIMIT)
        if task.done():
            return task.result()
        stop.set()
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        late = dict(found)
        for ep in names:
            late.setdefault(ep.host, NoAnswer())
        return late

    async def wait(self) -> int:
        await self._stop.wait()
        return self.exit_code

    async def close(self) -> None:
        """Undo what start() did, in reverse; only what was done."""
        if self.up:
            notify.stopping("shutting down")
        for t in self._timers.values():
            t.cancel()
        self._timers.clear()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        # a second SIGTERM while cleaning up must not cut the cleanup short:
        # the loop's handlers give way to the startup ones, with the signals
        # held meanwhile (between the two they would have their default action)
        held = signal.pthread_sigmask(signal.SIG_BLOCK, (*STOP_SIGNALS, signal.SIGHUP))
        try:
            if self.loop is not None:
                for sig in (*STOP_SIGNALS, signal.SIGHUP):
                    try:
                        self.loop.remove_signal_handler(sig)
                    except (ValueError, RuntimeError):
                        pass
            if self._early:
                self._catch_signals_early()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
        try:
            await self._undo()
        finally:
            self._restore_signals()

    async def _undo(self) -> None:
        here = True
        if self.tun is not None:
            try:
                here = self.tun.in_home_namespace()
            except OSError:
                here = True
        if self.routes is not None:
            self.routes.clear(interface_here=here)
            self.routes = None
        for name in ("metrics", "uapi"):  # the servers: the metrics first, then the UAPI
            server = getattr(self, name)
            if server is not None:
                server.close()
                try:
                    await asyncio.wait_for(server.wait_closed(), 2)
                except (asyncio.TimeoutError, Exception):
                    pass
                setattr(self, name, None)
        if self.dataplane is not None:
            self.dataplane.stop()
        for u in self.udps:
            u.sock.close()
        self.udps = []
        self.udp = None
        if self.tun is not None:
            self.tun.close()
            self.tun = None
        if self.up:
            log.info("%s down", self.interface)
            self.up = False

    async def run(self) -> int:
        try:
            await self.start()
            code = await self.wait()
        except StoppedDuringStartup as e:
            log.info("received %s during startup; undoing it", e)
            code = 0
        except DeletedDuringStartup as e:
            log.info("interface %s was deleted during startup; stopping", e)
            code = 0
        except (ConfigError, StartupError) as e:
            report_failure(str(e))
            code = 1
        except (OSError, ControlError) as e:
            report_failure(f"cannot start {self.interface}: {describe(e)}")
            code = 1
        finally:
            await self.close()
        return code


def _check_name(host: str) -> None:
    """A host name that DNS can carry: labels of 1-63 characters (RFC 1035,
    2.3.4), as the IDNA codec that getaddrinfo's caller uses checks them.
    OSError(EINVAL) otherwise: a malformed Endpoint, not one that resolves
    later."""
    try:
        host.rstrip(".").encode("idna")
    except UnicodeError:
        raise OSError(
            errno.EINVAL, f"{host[:80]}: not a valid host name (a label empty or over 63 characters)"
        ) from None


def _as_endpoint(addr: tuple, ep: Endpoint) -> Endpoint:
    """An address found for `ep` as a numeric Endpoint (a zone as ``%N``)."""
    host = addr[0] if len(addr) < 4 or not addr[3] else f"{addr[0]}%{addr[3]}"
    return Endpoint(host=host, port=addr[1], text=ep.text)


def _protocol_changes(config: ProtocolConfig) -> str:
    """The fields of `config` that differ from WireGuard's, as "name=value, ..."."""
    default = ProtocolConfig()
    return ", ".join(
        f"{f.name}={getattr(config, f.name)}"
        for f in dataclasses.fields(ProtocolConfig)
        if getattr(config, f.name) != getattr(default, f.name)
    )


def run_daemon(daemon: Daemon) -> int:
    """Run on uvloop (a default dependency), else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        log.debug("event loop: asyncio (uvloop is not installed)")
        return asyncio.run(daemon.run())
    log.debug("event loop: uvloop %s", uvloop.__version__)
    return uvloop.run(daemon.run())
