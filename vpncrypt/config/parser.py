"""Parser for the `wg setconf` file format, plus the wg-quick extras
Address, MTU and DNS.

Like `wg`, keys and section names are case-insensitive, ``#`` starts a
comment, and whitespace around keys and values is ignored. Unlike `wg`, a
single-valued key given twice in one section is an error, as is a second
[Interface] section. Every problem raises ConfigError naming file, line and
key; no message ever contains key material.
"""
from __future__ import annotations

import ipaddress
import logging
import os
import stat

from ..endpoints import parse_config_endpoint
from .keys import KeyFormatError, PresharedKey, PrivateKey, PublicKey
from .model import Config, ConfigError, InterfaceConfig, PeerConfig

log = logging.getLogger("vpncrypt.config")

_INTERFACE_KEYS = {k.lower(): k for k in
                   ("PrivateKey", "ListenPort", "FwMark", "Address", "MTU", "DNS", "Table")}
_PEER_KEYS = {k.lower(): k for k in
              ("PublicKey", "PresharedKey", "AllowedIPs", "Endpoint", "PersistentKeepalive")}
_MULTI_KEYS = {"AllowedIPs", "Address", "DNS"}
_REFUSED = {
    "postup": ("PostUp", "running commands from the config file is not supported; "
               "use ExecStartPost= in a systemd drop-in instead"),
    "postdown": ("PostDown", "running commands from the config file is not supported; "
                 "use ExecStopPost= in a systemd drop-in instead"),
    "preup": ("PreUp", "running commands from the config file is not supported; "
              "use ExecStartPre= in a systemd drop-in instead"),
    "predown": ("PreDown", "running commands from the config file is not supported; "
                "use ExecStop= in a systemd drop-in instead"),
    "saveconfig": ("SaveConfig", "not supported (vpncrypt never rewrites its config "
                   "file); remove the line"),
}
MIN_MTU, MAX_MTU = 68, 65535


class _Ctx:
    def __init__(self, path: str):
        self.path = path

    def err(self, line: int, section: str | None, key: str | None, msg: str) -> ConfigError:
        where = f"{self.path}:{line}: "
        if section and key:
            where += f"[{section}] {key}: "
        elif section:
            where += f"[{section}]: "
        elif key:
            where += f"{key}: "
        return ConfigError(where + msg, path=self.path, line=line)


def _parse_int(value: str, lo: int, hi: int, *, allow_off: bool = False,
               allow_hex: bool = False) -> int:
    v = value.strip()
    if allow_off and v.lower() == "off":
        return 0
    try:
        if allow_hex and v.lower().startswith("0x"):
            n = int(v[2:], 16)
        elif v.isdigit():
            n = int(v, 10)
        else:
            raise ValueError
    except ValueError:
        raise ValueError from None
    if not lo <= n <= hi:
        raise ValueError
    return n


parse_endpoint = parse_config_endpoint


def _split_list(value: str) -> list[str]:
    return [item.strip() for item in value.split(",")]


def parse_config(text: str, path: str = "<string>") -> Config:
    ctx = _Ctx(path)
    warnings: list[str] = []
    section: str | None = None
    seen_interface_line = 0
    iface: dict = {}
    iface_lines: dict = {}
    peers: list[tuple[int, dict, dict]] = []  # (header line, values, key lines)
    cur: dict | None = None
    cur_lines: dict | None = None

    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("["):
            if not line.endswith("]"):
                raise ctx.err(lineno, None, None, "a section header must end with ']'")
            name = "".join(line[1:-1].split()).lower()
            if name == "interface":
                if seen_interface_line:
                    raise ctx.err(lineno, "Interface", None,
                                  f"second [Interface] section (first on line {seen_interface_line})")
                seen_interface_line = lineno
                section, cur, cur_lines = "Interface", iface, iface_lines
            elif name == "peer":
                section = "Peer"
                cur, cur_lines = {}, {}
                peers.append((lineno, cur, cur_lines))
            else:
                raise ctx.err(lineno, None, None,
                              f"unknown section [{line[1:-1].strip()}] "
                              "(expected [Interface] or [Peer])")
            continue
        key_raw, sep, value = line.partition("=")
        if not sep:
            raise ctx.err(lineno, section, None,
                          "expected 'Key = Value' or a [Section] header")
        key_l = "".join(key_raw.split()).lower()
        value = value.strip()
        if key_l in _REFUSED:
            canon, why = _REFUSED[key_l]
            raise ctx.err(lineno, section, canon, why)
        if section is None:
            raise ctx.err(lineno, None, key_raw.strip(),
                          "outside of any section (put [Interface] or [Peer] first)")
        table = _INTERFACE_KEYS if section == "Interface" else _PEER_KEYS
        key = table.get(key_l)
        if key is None:
            other = _PEER_KEYS if section == "Interface" else _INTERFACE_KEYS
            hint = ""
            if key_l in other:
                hint = f" (it belongs in [{'Peer' if section == 'Interface' else 'Interface'}])"
            raise ctx.err(lineno, section, key_raw.strip(), "unknown key" + hint)
        if key not in _MULTI_KEYS and key in cur:
            raise ctx.err(lineno, section, key,
                          f"given twice (first on line {cur_lines[key]})")
        if not value and key not in ("AllowedIPs",):
            raise ctx.err(lineno, section, key, "empty value")
        cur_lines.setdefault(key, lineno)
        try:
            parsed = _parse_value(key, value)
        except ValueError as e:
            raise ctx.err(lineno, section, key, str(e)) from None
        if key in _MULTI_KEYS:
            cur.setdefault(key, []).extend(parsed)
        else:
            cur[key] = parsed
        if key == "DNS":
            warnings.append(f"{path}:{lineno}: [Interface] DNS is ignored by vpncrypt; "
                            "configure resolvers separately (e.g. resolvectl)")

    interface = InterfaceConfig(
        private_key=iface.get("PrivateKey"),
        listen_port=iface.get("ListenPort"),
        fwmark=iface.get("FwMark", 0),
        addresses=tuple(iface.get("Address", ())),
        mtu=iface.get("MTU"),
        dns=tuple(iface.get("DNS", ())),
        table=iface.get("Table"),
        lines=dict(iface_lines),
    )
    own_public = None
    if interface.private_key is not None and not interface.private_key.is_zero():
        try:
            from nacl.bindings import crypto_scalarmult_base
            own_public = crypto_scalarmult_base(bytes(interface.private_key))
        except Exception:  # pragma: no cover - pynacl is a dependency
            own_public = None

    out_peers: list[PeerConfig] = []
    first_line: dict = {}
    for header, vals, lines in peers:
        pk = vals.get("PublicKey")
        if pk is None:
            raise ctx.err(header, "Peer", None, "missing PublicKey")
        if pk in first_line:
            raise ctx.err(lines["PublicKey"], "Peer", "PublicKey",
                          f"the same peer is already defined on line {first_line[pk]}")
        first_line[pk] = header
        if own_public is not None and pk == own_public:
            warnings.append(f"{path}:{lines['PublicKey']}: [Peer] PublicKey: is this "
                            "interface's own public key; the peer is ignored (as wg does)")
            continue
        allowed = []
        for net in vals.get("AllowedIPs", []):
            if net not in allowed:
                allowed.append(net)
        out_peers.append(PeerConfig(
            public_key=pk,
            preshared_key=vals.get("PresharedKey"),
            allowed_ips=tuple(allowed),
            endpoint=vals.get("Endpoint"),
            persistent_keepalive=vals.get("PersistentKeepalive", 0),
            line=header,
            lines=dict(lines),
        ))
    cfg = Config(interface=interface, peers=tuple(out_peers), path=path,
                 warnings=tuple(warnings))
    log.debug("parsed %s: %r, %d peer(s)", path, cfg.interface, len(cfg.peers))
    for p in cfg.peers:
        log.debug("  peer %r", p)
    return cfg


def _parse_value(key: str, value: str):
    if key in ("PrivateKey", "PublicKey", "PresharedKey"):
        cls = {"PrivateKey": PrivateKey, "PublicKey": PublicKey,
               "PresharedKey": PresharedKey}[key]
        try:
            return cls.from_base64(value)
        except KeyFormatError as e:
            # never echo the value: it may be (a mangled) secret
            tool = {"PrivateKey": "wg genkey", "PublicKey": "wg pubkey",
                    "PresharedKey": "wg genpsk"}[key]
            raise ValueError(f"{e} (44 characters of base64, as printed by `{tool}`)") from None
    if key == "ListenPort":
        try:
            return _parse_int(value, 0, 65535)
        except ValueError:
            raise ValueError(f"'{value}' is not a port number (0-65535)") from None
    if key == "FwMark":
        try:
            return _parse_int(value, 0, 0xFFFFFFFF, allow_off=True, allow_hex=True)
        except ValueError:
            raise ValueError(f"'{value}' is not a 32-bit number or 'off'") from None
    if key == "PersistentKeepalive":
        try:
            return _parse_int(value, 0, 65535, allow_off=True)
        except ValueError:
            raise ValueError(f"'{value}' is not a number of seconds (0-65535) or 'off'") from None
    if key == "MTU":
        try:
            return _parse_int(value, MIN_MTU, MAX_MTU)
        except ValueError:
            raise ValueError(f"'{value}' is not an MTU ({MIN_MTU}-{MAX_MTU})") from None
    if key == "Endpoint":
        try:
            return parse_config_endpoint(value)
        except ValueError as e:
            raise ValueError(f"'{value}': {e}") from None
    if key == "AllowedIPs":
        out = []
        if not value:
            return out
        for item in _split_list(value):
            try:
                if not item:
                    raise ValueError
                out.append(ipaddress.ip_network(item, strict=False))
            except ValueError:
                raise ValueError(f"'{item}' is not an IP network") from None
        return out
    if key == "Address":
        out = []
        for item in _split_list(value):
            try:
                if not item:
                    raise ValueError
                out.append(ipaddress.ip_interface(item))
            except ValueError:
                raise ValueError(f"'{item}' is not an IP address (with optional /prefix)") from None
        return out
    if key == "DNS":
        return [item for item in _split_list(value) if item]
    if key == "Table":
        v = value.lower()
        if v == "auto":
            return None
        if v == "off":
            return "off"
        if value.isascii() and value.isdigit() and 0 < int(value) < 1 << 32:
            return int(value)
        if value.isascii() and value[0].isalpha() and value.replace("_", "").replace("-", "").isalnum():
            return value          # a name from /etc/iproute2/rt_tables
        raise ValueError(f"'{value}' is not 'off', 'auto' or a routing table")
    raise AssertionError(key)  # pragma: no cover


def load_config(path: str | os.PathLike) -> Config:
    """Read and parse ``path``. Refuses a file holding a PrivateKey or
    PresharedKey that group/others can read, or that another user owns."""
    from ..permissions import secret_file_problem

    path = os.fspath(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise ConfigError(f"{path}: cannot open: {e.strerror}", path=path) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{path}: not a regular file", path=path)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read()
    finally:
        os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        lineno = data[:e.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{lineno}: not valid UTF-8", path=path, line=lineno) from None
    cfg = parse_config(text, path)
    has_secret = cfg.interface.private_key is not None or any(
        p.preshared_key is not None for p in cfg.peers)
    if has_secret:
        problem = secret_file_problem(path, st)
        if problem:
            raise ConfigError(problem, path=path)
    return cfg
