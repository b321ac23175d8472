"""The vpncrypt daemon: config + UDP socket + TUN + data plane + UAPI server +
routes + sd_notify, on one asyncio (uvloop) event loop.

    daemon = Daemon("wg0", config_path="/etc/vpncrypt/wg0.conf")
    exit_code = run_daemon(daemon)          # blocks until SIGTERM/SIGINT

Startup, in an order that leaves nothing behind when a step fails: catch
SIGTERM/SIGINT/SIGHUP (before anything on the host changes), read the
config (a config error touches nothing), open the UDP socket (dual-stack
IPv6, or IPv4; with N queues, N sockets of one SO_REUSEPORT group on one
port), resolve the endpoints' host names (once: what is applied is the
address found), create the TUN device or attach to a persistent one (with N
queues, a multi-queue one: a descriptor per queue), add its Address lines,
build the data plane (data_plane.py), serve the UAPI on
/var/run/wireguard/IFACE.sock, serve the metrics if asked (metrics.py; a
port that cannot be bound fails the start), remove what an earlier run left
behind and add the routes, then send READY=1.  A SIGTERM during startup undoes what was
done so far and exits 0; a SIGHUP then is a reload once the daemon is up.

SIGHUP re-reads the config and applies it as `wg syncconf` would (sessions
of unchanged peers survive).  Host names are resolved in a thread, so that a
slow resolver stalls neither the tunnel nor the UAPI; reloads run one at a
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
import logging
import os
import signal
import socket
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Generic, Optional, TypeVar

from ..config import Config, ConfigError, SetAddresses, extras_operations, load_config, syncconf_operations
from ..endpoints import Endpoint, resolve_endpoint
from ..protocol.timers import ProtocolConfig
from . import notify
from .data_plane import DataPlane
from .device_control import DeviceControl
from .control import ControlError
from .logsetup import report_failure
from .routes import Routes
from .tun import TunDevice
from .udpsocket import open_udp_sockets, set_fwmark
from .uapi import DEFAULT_SOCKET_DIR, UAPIServer, apply_operations, socket_path, start_uapi_server

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


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StartupError(Exception):
    """Startup failed; the message is one line meant for the user."""


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
        """A peer's endpoint set by the file or the UAPI (for the debug trace)."""
        if self.dataplane is not None:
            self.dataplane.trace.endpoint_set(public_key, endpoint)

    def counters(self, peer_drops: bool = True) -> dict:
        return self._dp.counters(
            self.udp, loop=self.loop, pending_timers=len(self._timers), peer_drops=peer_drops
        )

    def rebind(self, port: int) -> None:
        """Every queue's socket to `port` (0: a random one, the same for
        all), together; the old ones closed once the new ones are in."""
        if port and port == self.listen_port:
            return
        socks = open_udp_sockets(port, self.fwmark, count=max(1, len(self.udps)))
        old = self.udps
        self._use_sockets(socks)
        self._dp.replace_udp(self.udps)
        for u in old:
            u.sock.close()
        log.info("listening on UDP port %d (%s)", self.listen_port, "IPv4+IPv6" if self.v6 else "IPv4 only")

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

    def _resolve(self, cfg: Config) -> Config:
        """`cfg` with every peer's Endpoint as the address it resolves to
        (each host name looked up once), so that applying it looks nothing
        up; ConfigError naming the Endpoint line otherwise.  Blocks on the
        resolver: called in a thread."""
        found: dict = {}
        peers = []
        for p in cfg.peers:
            ep = p.endpoint
            if ep is not None:
                try:
                    if ep.host not in found:
                        found[ep.host] = resolve_endpoint(ep, v6=self.v6)
                    addr = found[ep.host]
                except OSError as e:
                    line = p.line_of("Endpoint")
                    raise ConfigError(
                        f"{cfg.path}:{line}: [Peer] Endpoint: {describe(e)}", path=cfg.path, line=line
                    ) from None
                host = addr[0] if len(addr) < 4 or not addr[3] else f"{addr[0]}%{addr[3]}"
                p = dataclasses.replace(p, endpoint=Endpoint(host=host, port=ep.port, text=ep.text))
            peers.append(p)
        return dataclasses.replace(cfg, peers=tuple(peers))

    async def _resolve_at_start(self, cfg: Config) -> Config:
        """_resolve() in a thread, nothing on the host changed yet: a stop
        (`systemctl stop` while a resolver takes its time) ends the wait at
        once instead of after the resolver's timeouts."""
        task = asyncio.ensure_future(self._in_thread(self._resolve, cfg))
        while True:
            done, _ = await asyncio.wait({task}, timeout=0.05)
            if done:
                return task.result()
            if self._early_stop:
                task.cancel()  # the thread's answer, if it ever comes, is dropped
                self._checkpoint()

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
        self._open_socket(cfg)
        cfg = self.config = await self._resolve_at_start(cfg)
        self._checkpoint()
        self.tun = TunDevice.create(
            self.interface,
            mtu=iface.mtu if iface.mtu else None,
            addresses=iface.addresses,
            up=True,
            vnet_hdr=True,
            queues=len(self.udps),
            queue_fallback=self.queue_fallback,
        )
        queues = len(self._tun.queue_fds())
        if queues < len(self.udps):  # a persistent TUN of one queue (queue_fallback)
            for u in self.udps[queues:]:
                u.sock.close()
            del self.udps[queues:]
        self.mtu = self._tun.get_mtu()
        if iface.addresses:
            log.info("interface %s: addresses %s", self._tun.name, ", ".join(str(a) for a in iface.addresses))
        self._checkpoint()
        apply_operations(syncconf_operations(self.control.snapshot(), cfg), self.control)
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
        self.routes = Routes(
            self._tun.name, iface.table, get_fwmark=lambda: self.fwmark, set_fwmark=self.set_fwmark
        )
        self._routes.remove_leftovers()
        self._checkpoint()
        self._routes.sync(self._dp.allowed_ips())
        self._checkpoint()
        for sig in STOP_SIGNALS:
            self._loop.add_signal_handler(sig, self.stop, 0, signal.Signals(sig).name)
        self._loop.add_signal_handler(signal.SIGHUP, self.reload)
        self._checkpoint()  # one that came while the loop's handlers went in
        self._schedule_tick()
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
            new = self._read_config()
            new = await self._in_thread(self._resolve, new)  # the loop keeps serving
            if self._stop.is_set():
                return
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
        except (ConfigError, StartupError) as e:
            report_failure(str(e))
            code = 1
        except (OSError, ControlError) as e:
            report_failure(f"cannot start {self.interface}: {describe(e)}")
            code = 1
        finally:
            await self.close()
        return code


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
