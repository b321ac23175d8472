"""The vpncrypt daemon: config + TUN + UDP socket + protocol Device + data-plane
Engine + UAPI server + sd_notify, on one asyncio (uvloop) event loop.

    daemon = Daemon("wg0", config_path="/etc/vpncrypt/wg0.conf")
    exit_code = run_daemon(daemon)          # blocks until SIGTERM/SIGINT

Lifecycle: load the config (refusing a group/world-readable file holding
keys), create the TUN device (IFF_TUN|IFF_NO_PI, MTU from the config or
1420), add its Address lines, open the UDP socket (dual-stack IPv6 with
IPV6_V6ONLY=0 bound to ::, IPv4 if IPv6 is unavailable), build the Device and
the Engine (native fast path), serve the UAPI on /var/run/wireguard/IFACE.sock,
then send READY=1.  SIGHUP re-reads the config and applies the differences
only (sessions of unchanged peers survive); SIGTERM/SIGINT remove the socket
and the interface and exit 0.  If the interface disappears (e.g. `ip link
del`, `wg-quick down`) or the data plane fails, the daemon cleans up and
exits 1.

Test-only: VPNCRYPT_TEST_TIMERS="rekey_after_time=3,rekey_timeout=1" replaces
protocol timer constants (vpncrypt.protocol.timers.TimerConfig fields).  It
exists so that tests can see rekeys within seconds; never use it in
production (it weakens nothing cryptographically, but breaks interop
expectations about timing).
"""
from __future__ import annotations

import asyncio
import dataclasses
import errno
import ipaddress
import logging
import os
import signal
import socket
import sys
import time
from typing import Callable, Optional

from ..config import Config, ConfigError, diff_configs, load_config
from ..config.keys import PublicKey
from ..config.ops import PeerUpdate
from ..protocol.events import describe as describe_event
from ..protocol.timers import TimerConfig
from . import notify
from .control import Control, ControlError, InterfaceSnapshot, PeerSnapshot
from .tun import TunDevice, TunError
from .uapi import DEFAULT_SOCKET_DIR, apply_operations, socket_path, start_uapi_server

log = logging.getLogger("vpncrypt.daemon")

TEST_TIMERS_ENV = "VPNCRYPT_TEST_TIMERS"
# The TUN read buffers and the fast path's seal buffers are sized for this, so
# that the interface MTU can be changed at run time (`ip link set mtu`, as
# wg-quick does) without reallocating anything.
MAX_PACKET = 65535
BATCH = 64
SOCKET_BUFFER = 8 << 20
SO_RCVBUFFORCE, SO_SNDBUFFORCE = 33, 32
SO_MARK = getattr(socket, "SO_MARK", 36)
TICK = 1.0  # seconds between housekeeping rounds (interface check, MTU, STATUS=)


class DaemonError(Exception):
    """Startup failed; the message is meant for the user."""


# --------------------------------------------------------------------------
# test-only timers

def timer_config_from_env(env=None) -> Optional[TimerConfig]:
    """TimerConfig from $VPNCRYPT_TEST_TIMERS ("name=value,..."), or None."""
    env = os.environ if env is None else env
    spec = env.get(TEST_TIMERS_ENV, "").strip()
    if not spec:
        return None
    fields = {f.name: f for f in dataclasses.fields(TimerConfig)}
    values = {}
    for item in spec.split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        name = name.strip()
        if not sep or name not in fields:
            raise DaemonError(f"{TEST_TIMERS_ENV}: unknown timer {name!r} "
                              f"(known: {', '.join(sorted(fields))})")
        try:
            values[name] = int(value) if fields[name].type in (int, "int") else float(value)
        except ValueError:
            raise DaemonError(f"{TEST_TIMERS_ENV}: {name}: not a number: {value!r}") from None
    return TimerConfig(**values)


# --------------------------------------------------------------------------
# sockets and endpoints

def open_udp_socket(port: int, fwmark: int = 0) -> socket.socket:
    """A non-blocking UDP socket on `port` (0: random): dual-stack IPv6 when
    the host has IPv6, else IPv4."""
    sock = None
    try:
        sock = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        sock.bind(("::", port))
    except OSError as e:
        if sock is not None:
            sock.close()
        if e.errno not in (errno.EAFNOSUPPORT, errno.EADDRNOTAVAIL, errno.EPROTONOSUPPORT,
                           errno.EINVAL):
            raise _bind_error(e, port) from None
        log.info("IPv6 is unavailable (%s); using an IPv4-only socket", e.strerror)
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            sock.bind(("0.0.0.0", port))
        except OSError as e4:
            sock.close()
            raise _bind_error(e4, port) from None
    try:
        for force, opt in ((SO_RCVBUFFORCE, socket.SO_RCVBUF), (SO_SNDBUFFORCE, socket.SO_SNDBUF)):
            try:
                sock.setsockopt(socket.SOL_SOCKET, force, SOCKET_BUFFER)
            except OSError:
                sock.setsockopt(socket.SOL_SOCKET, opt, SOCKET_BUFFER)
        if fwmark:
            sock.setsockopt(socket.SOL_SOCKET, SO_MARK, fwmark)
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


SO_MEMINFO, SK_MEMINFO_DROPS = 55, 8


def socket_drops(sock) -> int:
    """Datagrams the kernel dropped at `sock` because its receive buffer was
    full (sk_drops, as in /proc/net/udp), from SO_MEMINFO; 0 if unavailable."""
    try:
        raw = sock.getsockopt(socket.SOL_SOCKET, SO_MEMINFO, 64)
    except OSError:
        return 0
    if len(raw) < 4 * (SK_MEMINFO_DROPS + 1):
        return 0
    return int.from_bytes(raw[4 * SK_MEMINFO_DROPS:4 * SK_MEMINFO_DROPS + 4], sys.byteorder)


def _bind_error(e: OSError, port: int) -> OSError:
    """The bind error with the port in its message (same errno), e.g.
    "[Errno 98] UDP port 51820: Address already in use"."""
    return OSError(e.errno, f"UDP port {port}: {e.strerror or e}")


def resolve_endpoint(ep, v6: bool = True):
    """An Endpoint (host may be a name) as the (host, port[, 0, scope]) tuple
    the data plane uses.  Raises ControlError if it cannot be used."""
    host, port = ep.host, ep.port
    bare = host.split("%", 1)[0]
    try:
        ip = ipaddress.ip_address(bare)
    except ValueError:
        ip = None
    if ip is not None:
        if ip.version == 6 and not v6:
            raise ControlError(errno.EAFNOSUPPORT, f"endpoint {ep}: IPv6 is unavailable")
        if ip.version == 6 and getattr(ip, "ipv4_mapped", None) is not None:
            return (str(ip.ipv4_mapped), port)
        if "%" in host:
            scope = host.split("%", 1)[1]
            scope_id = int(scope) if scope.isdigit() else socket.if_nametoindex(scope)
            return (bare, port, 0, scope_id)
        return (str(ip), port)
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_UNSPEC if v6 else socket.AF_INET,
                                   socket.SOCK_DGRAM)
    except socket.gaierror as e:
        raise ControlError(errno.EADDRNOTAVAIL, f"cannot resolve {host}: {e.strerror}") from None
    if not infos:
        raise ControlError(errno.EADDRNOTAVAIL, f"cannot resolve {host}")
    fam, _t, _p, _c, sa = infos[0]
    if fam == socket.AF_INET6 and sa[3]:
        return (sa[0], sa[1], 0, sa[3])
    return (sa[0], sa[1])


def format_addr(addr) -> Optional[str]:
    if addr is None:
        return None
    host, port = addr[0], addr[1]
    if ":" in host:
        if len(addr) >= 4 and addr[3]:
            host = f"{host}%{addr[3]}"
        return f"[{host}]:{port}"
    return f"{host}:{port}"


def _ifindex(name: str) -> Optional[int]:
    try:
        return socket.if_nametoindex(name)
    except OSError:
        return None


# --------------------------------------------------------------------------
# the Control adapter the UAPI server (and the SIGHUP reload) drive

class DeviceControl(Control):
    def __init__(self, daemon: "Daemon"):
        self.d = daemon

    @property
    def device(self):
        return self.d.device

    def _changed(self) -> None:
        self.d.changed()

    def snapshot(self) -> InterfaceSnapshot:
        dev = self.device
        now = dev.table.clock(time.monotonic())     # the loop's clock (asyncio and uvloop)
        peers = []
        for peer in dev.peers.values():
            c = peer.counters
            st = peer.stats(now)
            lh = c.last_handshake or 0.0
            sec = int(lh)
            peers.append(PeerSnapshot(
                public_key=peer.public_key, preshared_key=peer.preshared_key,
                endpoint=format_addr(st.endpoint),
                persistent_keepalive=peer.persistent_keepalive,
                allowed_ips=peer.allowed_ips,
                last_handshake_time_sec=sec,
                last_handshake_time_nsec=int((lh - sec) * 1e9) if lh else 0,
                rx_bytes=c.rx_bytes + st.rx_wire_bytes, tx_bytes=c.tx_bytes + st.tx_wire_bytes))
        return InterfaceSnapshot(private_key=dev.private_key, listen_port=self.d.listen_port,
                                 fwmark=self.d.fwmark, peers=peers, counters=self.d.counters())

    def set_private_key(self, key) -> None:
        new = bytes(key) if key is not None else None
        if new == self.device.private_key:
            return  # unchanged (wg setconf always sends it): keep the sessions
        self.device.set_private_key(new)
        log.info("private key %s", "set" if new else "removed")
        self._changed()

    def set_listen_port(self, port: int) -> None:
        self.d.rebind(port)

    def set_fwmark(self, fwmark: int) -> None:
        self.d.set_fwmark(fwmark)

    def replace_peers(self) -> None:
        self.device.clear_peers()
        self._changed()

    def has_peer(self, public_key) -> bool:
        return bytes(public_key) in self.device.peers

    def remove_peer(self, public_key) -> None:
        if bytes(public_key) in self.device.peers:
            self.device.remove_peer(bytes(public_key))
            log.info("peer %s removed", PublicKey(public_key).fingerprint())
            self._changed()

    def upsert_peer(self, update: PeerUpdate) -> None:
        dev = self.device
        pk = bytes(update.public_key)
        if dev.public_key is not None and pk == dev.public_key:
            return  # as wireguard-go: a peer with our own key is ignored
        endpoint = None
        if update.endpoint is not None:
            endpoint = resolve_endpoint(update.endpoint, self.d.v6)
        allowed = [ipaddress.ip_network(n, strict=False) for n in update.allowed_ips]
        psk = bytes(update.preshared_key) if update.preshared_key is not None else None
        if pk not in dev.peers:
            try:
                dev.add_peer(pk, preshared_key=psk, allowed_ips=allowed, endpoint=endpoint,
                             persistent_keepalive=update.persistent_keepalive or 0)
            except ValueError as e:
                raise ControlError(errno.EINVAL, str(e)) from None
            log.info("peer %s added", PublicKey(pk).fingerprint())
        else:
            kw = {}
            if psk is not None:
                kw["preshared_key"] = psk
            if endpoint is not None:
                kw["endpoint"] = endpoint
            if update.persistent_keepalive is not None:
                kw["persistent_keepalive"] = update.persistent_keepalive
            dev.update_peer(pk, allowed_ips=allowed,
                            replace_allowed_ips=update.replace_allowed_ips, **kw)
        self._changed()

    def set_mtu(self, mtu: int) -> None:
        self.d.tun.set_mtu(mtu)
        self.d.check_mtu()

    def set_addresses(self, add, remove) -> None:
        self.d.tun.set_addresses(add=add, remove=remove)


# --------------------------------------------------------------------------
# the daemon

class Daemon:
    def __init__(self, interface: str, config_path: Optional[str] = None, *,
                 socket_dir: str = DEFAULT_SOCKET_DIR,
                 timer_config: Optional[TimerConfig] = None,
                 on_ready: Optional[Callable[[], None]] = None):
        self.interface = interface
        self.config_path = config_path
        self.socket_dir = socket_dir
        self.timer_config = timer_config
        self.on_ready = on_ready
        self.config: Config = Config()
        self.tun: Optional[TunDevice] = None
        self.udp = None
        self.device = None
        self.engine = None
        self.uapi = None
        self.control = DeviceControl(self)
        self.listen_port = 0
        self.fwmark = 0
        self.v6 = True
        self.mtu = 0
        self.exit_code = 0
        self.loop: Optional[asyncio.AbstractEventLoop] = None
        self._stop: Optional[asyncio.Event] = None
        self._ifindex = None
        self._status = None
        self._timers = {}      # purpose -> the one pending TimerHandle

    # ------------------------------------------------------------ helpers

    def changed(self) -> None:
        """After any change made to the Device from outside the engine."""
        if self.engine is not None:
            self.engine.changed()

    def counters(self) -> dict:
        dev = self.device
        out = {"drop_" + k: v for k, v in dev.drops().items()}
        eng = self.engine
        if eng is not None:
            for k, v in eng.counters.as_dict().items():
                out["engine_" + k] = v
            if eng.udp is not None:
                # the kernel's count for our socket (receive buffer full), and
                # datagrams too large for a receive slot
                out["drop_socket_overflow"] = socket_drops(eng.udp.sock)
                if eng.udp.dropped:
                    out["drop_truncated"] = int(eng.udp.dropped)
        out["handshakes_sent"] = dev.counters.handshakes_sent
        out["handshakes_completed"] = dev.counters.handshakes_completed
        # resource gauges, for the long-run tests: nothing here may grow
        if self.loop is not None:
            out["asyncio_tasks"] = len(asyncio.all_tasks(self.loop))
        out["pending_timers"] = len(self._timers)
        return out

    def _udp_batch(self, sock):
        from ..dataplane.io import UdpBatchSocket
        return UdpBatchSocket(sock, batch=BATCH, mtu=MAX_PACKET)

    def rebind(self, port: int) -> None:
        if port and port == self.listen_port:
            return
        sock = open_udp_socket(port, self.fwmark)
        old = self.udp
        self.udp = self._udp_batch(sock)
        self.v6 = sock.family == socket.AF_INET6
        self.listen_port = sock.getsockname()[1]
        if self.engine is not None:
            self.engine.replace_udp(self.udp)
        if old is not None:
            old.sock.close()
        log.info("listening on UDP port %d (%s)", self.listen_port,
                 "IPv4+IPv6" if self.v6 else "IPv4 only")

    def set_fwmark(self, fwmark: int) -> None:
        self.udp.sock.setsockopt(socket.SOL_SOCKET, SO_MARK, fwmark)
        self.fwmark = fwmark

    def check_mtu(self) -> None:
        try:
            mtu = self.tun.get_mtu()
        except OSError:
            return
        if mtu != self.mtu:
            if self.mtu:
                log.info("interface %s: MTU %d -> %d", self.interface, self.mtu, mtu)
            self.mtu = mtu
            self.device.set_mtu(mtu)   # the padding cap; buffers hold MAX_PACKET

    def _status_text(self) -> str:
        peers = self.device.peers.values()
        last = max((p.counters.last_handshake for p in peers), default=0.0)
        n = len(self.device.peers)
        text = f"{n} peer{'s' if n != 1 else ''}"
        if last:
            text += ", last handshake " + time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(last))
        else:
            text += ", no handshake yet"
        return text

    # ------------------------------------------------------------ startup

    def _load_config(self) -> Config:
        if self.config_path is None:
            return Config()
        cfg = load_config(self.config_path)
        for w in cfg.warnings:
            log.warning("%s", w)
        return cfg

    def _apply_initial_peers(self, cfg: Config) -> None:
        for p in cfg.peers:
            try:
                self.control.upsert_peer(PeerUpdate(
                    public_key=p.public_key, preshared_key=p.preshared_key, endpoint=p.endpoint,
                    persistent_keepalive=p.persistent_keepalive, replace_allowed_ips=True,
                    allowed_ips=tuple(p.allowed_ips)))
            except ControlError as e:
                raise DaemonError(f"{cfg.path}:{p.line}: [Peer] Endpoint: {e}") from None

    async def start(self) -> None:
        from ..dataplane.engine import Engine
        from ..dataplane.io import TunBatch
        from ..protocol.device import Device

        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        cfg = self.config = self._load_config()
        iface = cfg.interface
        self.tun = TunDevice.create(self.interface, mtu=cfg.effective_mtu,
                                    addresses=iface.addresses, up=True)
        self._ifindex = _ifindex(self.tun.name)
        self.mtu = cfg.effective_mtu
        if iface.addresses:
            log.info("interface %s: addresses %s", self.tun.name,
                     ", ".join(str(a) for a in iface.addresses))
        self.fwmark = iface.fwmark or 0
        self.device = Device(bytes(iface.private_key) if iface.private_key is not None else None,
                             timer_config=self.timer_config, mtu=self.mtu)
        if self.timer_config is not None:
            log.warning("test-only protocol timers in use (%s): %s", TEST_TIMERS_ENV,
                        os.environ.get(TEST_TIMERS_ENV, ""))
        self.rebind(iface.listen_port or 0)
        self._apply_initial_peers(cfg)
        inner = TunBatch(self.tun.fileno(), mtu=MAX_PACKET, batch=BATCH)
        self.engine = Engine(self.device, self.udp, inner, loop=self.loop, max_packet=MAX_PACKET,
                             on_fatal=self._on_fatal, on_events=self._on_events)
        self.engine.start()
        self.uapi = await start_uapi_server(socket_path(self.tun.name, self.socket_dir),
                                            self.control, extensions_in_get=False)
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self.stop, 0, signal.Signals(sig).name)
        self.loop.add_signal_handler(signal.SIGHUP, self.reload)
        self._schedule_tick()
        wd = notify.watchdog_interval()
        if wd:
            self._schedule_watchdog(wd)
        self._status = self._status_text()
        log.info("%s up: %s, UDP port %d, MTU %d", self.tun.name, self._status,
                 self.listen_port, self.mtu)
        notify.ready(self._status)
        if self.on_ready is not None:
            self.on_ready()

    # ------------------------------------------------------------ running

    def _schedule_tick(self) -> None:
        self._timers["tick"] = self.loop.call_later(TICK, self._tick)

    def _tick(self) -> None:
        if self._stop.is_set():
            return
        idx = _ifindex(self.tun.name)
        if idx is None or idx != self._ifindex:
            log.error("interface %s was deleted; shutting down", self.tun.name)
            self.stop(1)
            return
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
            self._timers["watchdog"] = self.loop.call_later(interval, ping)
        ping()

    def _on_events(self, events) -> None:
        """Protocol events, for the debug log."""
        if log.isEnabledFor(logging.DEBUG):
            for ev in events:
                log.debug("%s", describe_event(ev))

    def _on_fatal(self, exc) -> None:
        if _ifindex(self.tun.name) is None:
            log.error("interface %s was deleted; shutting down", self.tun.name)
        else:
            log.error("data plane failed (%s); shutting down", exc)
        self.stop(1)

    def stop(self, code: int = 0, why: str = "") -> None:
        if why:
            log.info("received %s; shutting down", why)
        if not self._stop.is_set():
            self.exit_code = code
            self._stop.set()

    def reload(self) -> None:
        if self.config_path is None:
            log.warning("SIGHUP: no config file to reload (configure through the UAPI)")
            return
        notify.reloading()
        try:
            new = self._load_config()
            ops = diff_configs(self.config, new)
            apply_operations(ops, self.control)
            self.config = new
            log.info("reloaded %s: %d change(s) applied", self.config_path, len(ops))
        except (ConfigError, ControlError, OSError, ValueError) as e:
            log.error("reload failed, keeping the running configuration: %s", e)
        finally:
            self.changed()
            self._status = self._status_text()
            notify.ready(self._status)

    async def wait(self) -> int:
        await self._stop.wait()
        return self.exit_code

    async def close(self) -> None:
        notify.stopping("shutting down")
        for t in self._timers.values():
            t.cancel()
        self._timers.clear()
        if self.loop is not None:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                try:
                    self.loop.remove_signal_handler(sig)
                except (ValueError, RuntimeError):
                    pass
        if self.uapi is not None:
            self.uapi.close()
            try:
                await asyncio.wait_for(self.uapi.wait_closed(), 2)
            except (asyncio.TimeoutError, Exception):
                pass
            self.uapi = None
        if self.engine is not None:
            self.engine.stop()
        if self.device is not None:
            self.device.clear_peers()
            self.device.set_private_key(None)
        if self.udp is not None:
            self.udp.sock.close()
            self.udp = None
        if self.tun is not None:
            self.tun.close()
            self.tun = None
        log.info("%s down", self.interface)

    async def run(self) -> int:
        try:
            await self.start()
            code = await self.wait()
        except (ConfigError, DaemonError, TunError, PermissionError) as e:
            log.error("%s", e)
            code = 1
        except OSError as e:
            log.error("cannot start %s: %s", self.interface, e)
            code = 1
        finally:
            await self.close()
        return code


def run_daemon(daemon: Daemon) -> int:
    """Run on uvloop when it is installed."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(daemon.run())
    return uvloop.run(daemon.run())
