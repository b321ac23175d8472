"""The proxy's config file: wireproxy's format.

A wg-quick [Interface]/[Peer] config (vpncrypt's own parser reads those
sections; or `WGConfig = PATH` before any section names a separate file), with:

    [Socks5]           BindAddress = HOST:PORT, Username, Password (both or neither)
    [http]             BindAddress, Username, Password
    [TCPClientTunnel]  BindAddress (on the host), Target = HOST:PORT (through the tunnel)
    [TCPServerTunnel]  ListenPort (on the tunnel address), Target = HOST:PORT (on the host)

Section and key names are matched without regard to case.  Every error is
one line, FILE:LINE: [Section] Key: reason (ConfigError).
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field, replace
from typing import Any

from vpncrypt.config.model import Config, ConfigError
from vpncrypt.config.parser import parse_config, read_config_file
from vpncrypt.permissions import secret_file_problem

_PROXY_KEYS = {
    "socks5": ("Socks5", ("BindAddress", "Username", "Password")),
    "http": ("http", ("BindAddress", "Username", "Password")),
    "tcpclienttunnel": ("TCPClientTunnel", ("BindAddress", "Target")),
    "tcpservertunnel": ("TCPServerTunnel", ("ListenPort", "Target")),
}
# wireproxy's sections this step does not serve yet: refused by name rather
# than as unknown, so the reader knows they are meant
_LATER = {
    "udpclienttunnel": "UDPClientTunnel",
    "udpservertunnel": "UDPServerTunnel",
    "stdiotunnel": "STDIOTunnel",
}
# wireproxy's [Interface] keys of its own (a health check by ping): named
# rather than left to vpncrypt's parser, which would call them unknown
_INTERFACE_LATER = {"checkalive": "CheckAlive", "checkaliveinterval": "CheckAliveInterval"}
_REQUIRED = {"Socks5": "BindAddress", "http": "BindAddress", "TCPClientTunnel": "BindAddress"}


@dataclass(frozen=True)
class HostPort:
    host: str  # an IP literal (no brackets) or a name; "" for every address
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Front:
    """One proxy section: its kind (the section's name as spelled above),
    where it listens and what it reaches, its credentials, its line."""

    kind: str
    line: int
    bind: HostPort | None = None
    target: HostPort | None = None
    listen_port: int = 0
    username: str | None = None
    password: str | None = None


@dataclass(frozen=True)
class ProxySettings:
    wg: Config
    fronts: tuple[Front, ...] = field(default_factory=tuple)
    path: str = ""


def parse_host_port(text: str, *, need_host: bool) -> HostPort:
    """HOST:PORT, [V6]:PORT or (need_host False) :PORT; ValueError with the reason."""
    host, sep, port = text.rpartition(":")
    if not sep:
        raise ValueError("expected HOST:PORT")
    if host.startswith("["):
        if not host.endswith("]"):
            raise ValueError("an IPv6 address in [] expected before the port")
        host = host[1:-1]
    elif ":" in host:
        raise ValueError("an IPv6 address needs brackets: [ADDRESS]:PORT")
    if not host and need_host:
        raise ValueError("a host is needed before the port")
    if not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"port {port!r}: expected 1 to 65535")
    if any(c.isspace() for c in host):
        raise ValueError("a host name has no spaces")
    return HostPort(host, int(port))


class _Reader:
    """Splits the file: the proxy sections parsed here, the rest handed to
    vpncrypt's parser with the proxy lines blanked (so its line numbers stay)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fronts: list[Front] = []
        self.wg_config: tuple[int, str] | None = None

    def err(self, line: int, section: str | None, key: str | None, why: str) -> ConfigError:
        where = f"{self.path}:{line}: " + (f"[{section}] " if section else "") + (f"{key}: " if key else "")
        return ConfigError(where + why, path=self.path, line=line)

    def split(self, data: bytes) -> bytes:
        kept: list[bytes] = []
        section: str | None = None  # a proxy section's canonical name, else None
        values: dict[str, tuple[int, str]] = {}
        header = 0
        wg_section = ""
        for lineno, raw in enumerate(data.split(b"\n"), start=1):
            text = raw.split(b"#", 1)[0].strip()
            if text.startswith(b"["):
                self._close(section, header, values)
                name = text[1:-1].decode("utf-8", "replace").strip().lower() if text.endswith(b"]") else ""
                if name in _LATER:
                    raise self.err(lineno, _LATER[name], None, "not supported by vpncrypt proxy yet")
                section, header, values = (_PROXY_KEYS[name][0] if name in _PROXY_KEYS else None), lineno, {}
                wg_section = name
            elif section is None and wg_section == "interface" and text:
                self._interface_later(lineno, text)
            elif section is not None and text:
                self._value(section, lineno, text, values)
            elif section is None and header == 0 and text:
                self._top(lineno, text)
            if section is not None or (header == 0 and text):
                kept.append(b"")  # a proxy line, or wireproxy's top-level WGConfig
            else:
                kept.append(raw)
        self._close(section, header, values)
        return b"\n".join(kept)

    def _interface_later(self, lineno: int, text: bytes) -> None:
        key = _INTERFACE_LATER.get(text.decode("utf-8", "replace").partition("=")[0].strip().lower())
        if key is not None:
            raise self.err(lineno, "Interface", key, "not supported by vpncrypt proxy yet")

    def _top(self, lineno: int, text: bytes) -> None:
        key, sep, value = text.decode("utf-8", "replace").partition("=")
        if not sep or key.strip().lower() != "wgconfig":
            raise self.err(
                lineno, None, key.strip() or None, "outside of any section (put [Interface] first)"
            )
        if not value.strip():
            raise self.err(lineno, None, "WGConfig", "empty value")
        self.wg_config = (lineno, value.strip())

    def _value(self, section: str, lineno: int, text: bytes, values: dict[str, tuple[int, str]]) -> None:
        try:
            key_raw, sep, value = text.decode("utf-8").partition("=")
        except UnicodeDecodeError:
            raise self.err(lineno, section, None, "not valid UTF-8") from None
        if not sep:
            raise self.err(lineno, section, None, "expected 'Key = Value' or a [Section] header")
        low = {k.lower(): k for k in _PROXY_KEYS[section.lower()][1]}
        key = low.get(key_raw.strip().lower())
        if key is None:
            raise self.err(lineno, section, key_raw.strip(), "unknown key")
        if key in values:
            raise self.err(lineno, section, key, f"given twice (first on line {values[key][0]})")
        if not value.strip():
            raise self.err(lineno, section, key, "empty value")
        values[key] = (lineno, value.strip())

    def _close(self, section: str | None, header: int, values: dict[str, tuple[int, str]]) -> None:
        if section is None:
            return
        need = _REQUIRED.get(section)
        if need and need not in values:
            raise self.err(header, section, need, "missing")
        if section == "TCPServerTunnel":
            for k in ("ListenPort", "Target"):
                if k not in values:
                    raise self.err(header, section, k, "missing")
        if section == "TCPClientTunnel" and "Target" not in values:
            raise self.err(header, section, "Target", "missing")
        if ("Username" in values) != ("Password" in values):
            given, other = ("Username", "Password") if "Username" in values else ("Password", "Username")
            raise self.err(values[given][0], section, other, f"missing (given with {given})")
        front = self._front(section, header, values)
        first = next(
            (f.line for f in self.fronts if front.listen_port and f.listen_port == front.listen_port), 0
        )
        if first:
            line = values["ListenPort"][0]
            raise self.err(
                line, section, "ListenPort", f"{front.listen_port} is served already (line {first})"
            )
        self.fronts.append(front)

    def _front(self, section: str, header: int, values: dict[str, tuple[int, str]]) -> Front:
        kw: dict[str, Any] = {}
        for key, (line, value) in values.items():
            try:
                if key == "BindAddress":
                    kw["bind"] = parse_host_port(value, need_host=False)
                elif key == "Target":
                    kw["target"] = parse_host_port(value, need_host=True)
                elif key == "ListenPort":
                    if not value.isascii() or not value.isdigit() or not 1 <= int(value) <= 65535:
                        raise ValueError(f"{value!r}: expected 1 to 65535")
                    kw["listen_port"] = int(value)
                elif len(value.encode()) > 255:  # RFC 1929: each is 1 to 255 bytes
                    raise ValueError("longer than 255 bytes (RFC 1929)")
                else:
                    kw[key.lower()] = value
            except ValueError as e:
                raise self.err(line, section, key, str(e)) from None
        return Front(kind=section, line=header, **kw)


def _wg_part(reader: _Reader, rest: bytes, st: os.stat_result) -> Config:
    """The [Interface]/[Peer] part: the file's own, or WGConfig's file."""
    if reader.wg_config is None:
        wg = parse_config(rest, reader.path)
        path = reader.path
    else:
        line, name = reader.wg_config
        if wg_sections(rest):
            raise reader.err(line, None, "WGConfig", "given with an [Interface] or [Peer] section of its own")
        wg_path = os.path.join(os.path.dirname(reader.path), os.path.expanduser(name))
        try:
            data, st = read_config_file(wg_path)
        except ConfigError as e:
            raise reader.err(line, None, "WGConfig", str(e)) from None
        wg, path = parse_config(data, wg_path), wg_path
    has_secret = wg.interface.private_key is not None or any(p.preshared_key is not None for p in wg.peers)
    problem = secret_file_problem(path, st) if has_secret else None
    if problem:
        raise ConfigError(problem, path=path)
    if wg.interface.private_key is None:
        raise ConfigError(f"{path}: [Interface] PrivateKey: missing", path=path)
    check_interface(wg, path)
    return _as_wireproxy(wg)


# wireproxy sends `allowed_ip=0.0.0.0/0` and `::0/0` for a [Peer] without
# AllowedIPs (its README's sample has none), so such a peer takes every
# destination; vpncrypt up's reading (a peer that takes nothing) would answer
# every request "host unreachable"
_EVERYTHING = (ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0"))


def _as_wireproxy(wg: Config) -> Config:
    """What wireproxy makes of the wg-quick part where vpncrypt up reads it
    otherwise: the default AllowedIPs above, and DNS, which the proxy uses
    (vpncrypt up's warning that it ignores DNS would be untrue here)."""
    peers = tuple(p if p.allowed_ips else replace(p, allowed_ips=_EVERYTHING) for p in wg.peers)
    warnings = tuple(w for w in wg.warnings if "[Interface] DNS is ignored" not in w)
    return replace(wg, peers=peers, warnings=warnings)


def check_interface(wg: Config, path: str) -> None:
    """What the proxy cannot do with an [Interface] that `vpncrypt up` takes."""
    iface = wg.interface
    if iface.fwmark:
        line = iface.line_of("FwMark")
        raise ConfigError(
            f"{path}:{line}: [Interface] FwMark: marking the UDP socket needs CAP_NET_ADMIN, "
            "which vpncrypt proxy runs without",
            path=path,
            line=line,
        )
    if not iface.addresses:
        raise ConfigError(
            f"{path}: [Interface] Address: missing (the proxy's connections leave from it)", path=path
        )


def wg_sections(data: bytes) -> bool:
    return any(
        line.split(b"#", 1)[0].strip().lower() in (b"[interface]", b"[peer]") for line in data.split(b"\n")
    )


def load_settings(path: str) -> ProxySettings:
    """Read and check the whole config (ConfigError, one line, otherwise)."""
    data, st = read_config_file(path)
    reader = _Reader(path)
    rest = reader.split(data)
    wg = _wg_part(reader, rest, st)
    if not reader.fronts:
        raise ConfigError(
            f"{path}: nothing to serve: no [Socks5], [http], [TCPClientTunnel] or [TCPServerTunnel]",
            path=path,
        )
    return ProxySettings(wg=wg, fronts=tuple(reader.fronts), path=path)
