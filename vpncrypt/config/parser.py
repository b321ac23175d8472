"""Parser for the `wg setconf` file format, plus the wg-quick extras
Address, MTU and DNS.

Lines are read as `wg` reads them: a line ends at "\n" only (not at
"\f", "\v", a lone "\r" or the Unicode line separators, which would let a
comment hide a setting from `wg` and editors but not from vpncrypt); ``#``
starts a comment that runs to the end of that line; every ASCII whitespace
character (space, "\t", "\r", "\v", "\f") is removed from the line before it is
parsed, also inside values (``10.1.0.0 / 24``). Comments are cut off before
the text is decoded, so only bytes outside comments must be UTF-8. Keys and
section names are case-insensitive. Unlike `wg`, a single-valued key given
twice in one section is an error, as is a second [Interface] section or a
second [Peer] with the same PublicKey (wg merges them). Every problem raises
ConfigError naming file, line and key; no message ever contains key material.
"""

from __future__ import annotations

import logging
import os
import re
import stat
from typing import Any, Callable

from ..endpoints import parse_config_endpoint
from .keytypes import KeyFormatError, PresharedKey, PrivateKey, PublicKey, is_published, is_published_private
from .model import Config, ConfigError, InterfaceConfig, PeerConfig
from .prefixes import parse_interface, parse_network
from .rttables import table_names

# What a config key's name may be (the longest, PersistentKeepalive, has 19
# letters): anything else before the first '=' is not named in an error, for
# it may be key material (a key's base64 ends in '=')
_KEY_NAME = re.compile(r"[A-Za-z][A-Za-z0-9]{0,19}")

log = logging.getLogger("vpncrypt.config")

_INTERFACE_KEYS = {
    k.lower(): k for k in ("PrivateKey", "ListenPort", "FwMark", "Address", "MTU", "DNS", "Table")
}
_PEER_KEYS = {
    k.lower(): k for k in ("PublicKey", "PresharedKey", "AllowedIPs", "Endpoint", "PersistentKeepalive")
}
_MULTI_KEYS = {"AllowedIPs", "Address", "DNS"}
_REFUSED = {
    "postup": (
        "PostUp",
        "running commands from the config file is not supported; "
        "use ExecStartPost= in a systemd drop-in instead",
    ),
    "postdown": (
        "PostDown",
        "running commands from the config file is not supported; "
        "use ExecStopPost= in a systemd drop-in instead",
    ),
    "preup": (
        "PreUp",
        "running commands from the config file is not supported; "
        "use ExecStartPre= in a systemd drop-in instead",
    ),
    "predown": (
        "PreDown",
        "running commands from the config file is not supported; use ExecStop= in a systemd drop-in instead",
    ),
    "saveconfig": ("SaveConfig", "not supported (vpncrypt never rewrites its config file); remove the line"),
}
MIN_MTU, MAX_MTU = 68, 65535
# wg's char_is_space() less "\n", which ends the line
_BLANKS = b" \t\r\v\f"


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


def _digits(v: str) -> bool:
    """ASCII decimal digits only: str.isdigit() alone takes '١٢٣' or '²'."""
    return v.isascii() and v.isdigit()


def _parse_int(v: str, lo: int, hi: int, *, allow_off: bool = False, allow_hex: bool = False) -> int:
    """``off`` (any case, as wg's strcasecmp), decimal digits, or (with
    allow_hex) a lowercase ``0x`` and hex digits, as wg's parse_fwmark: no
    sign, no ``0X``, no ``_`` as int() would allow."""
    if allow_off and v.lower() == "off":
        return 0
    if allow_hex and v.startswith("0x") and len(v) > 2 and all(c in "0123456789abcdefABCDEF" for c in v[2:]):
        n = int(v[2:], 16)
    elif _digits(v):
        n = int(v, 10)
    else:
        raise ValueError
    if not lo <= n <= hi:
        raise ValueError
    return n


parse_endpoint = parse_config_endpoint


def _lines(data: bytes, ctx: _Ctx):
    """(line number, text) of each line that has something besides comment
    and whitespace: split at "\n" only, the comment cut off and the blanks
    removed before decoding, so a comment may hold any bytes."""
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        raw = raw.split(b"#", 1)[0].translate(None, _BLANKS)
        if not raw:
            continue
        try:
            yield lineno, raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ctx.err(lineno, None, None, "not valid UTF-8") from None


def _key_name_at_start(text: str) -> str | None:
    """The config key `text` begins with (as it is spelled: "PrivateKey"), or None."""
    low = text.lower()
    names = {**_INTERFACE_KEYS, **_PEER_KEYS, **{k: v[0] for k, v in _REFUSED.items()}}
    return next((names[k] for k in sorted(names, key=len, reverse=True) if low.startswith(k)), None)


def parse_config(text: str | bytes, path: str = "<string>") -> Config:
    """Parse a config file's contents (bytes as read, or text)."""
    ctx = _Ctx(path)
    if isinstance(text, str):
        # a lone surrogate becomes bytes that are not UTF-8: refused with its line
        text = text.encode("utf-8", "surrogatepass")
    warnings: list[str] = []
    section: str | None = None
    seen_interface_line = 0
    iface: dict = {}
    iface_lines: dict = {}
    peers: list[tuple[int, dict, dict]] = []  # (header line, values, key lines)
    cur: dict = {}  # the section being read (set with `section`)
    cur_lines: dict = {}

    for lineno, line in _lines(text, ctx):
        if line.startswith("["):
            if not line.endswith("]"):
                raise ctx.err(lineno, None, None, "a section header must end with ']'")
            name = line[1:-1].lower()
            if name == "interface":
                if seen_interface_line:
                    raise ctx.err(
                        lineno,
                        "Interface",
                        None,
                        f"second [Interface] section (first on line {seen_interface_line})",
                    )
                seen_interface_line = lineno
                section, cur, cur_lines = "Interface", iface, iface_lines
            elif name == "peer":
                section = "Peer"
                cur, cur_lines = {}, {}
                peers.append((lineno, cur, cur_lines))
            else:
                raise ctx.err(
                    lineno, None, None, f"unknown section [{line[1:-1]}] (expected [Interface] or [Peer])"
                )
            continue
        key_raw, sep, value = line.partition("=")
        if not sep:
            raise ctx.err(lineno, section, None, "expected 'Key = Value' or a [Section] header")
        if not _KEY_NAME.fullmatch(key_raw):
            # e.g. "PrivateKey: <key>=": what precedes the first '=' holds the
            # key itself (its base64 ends in '='); only its leading word is named
            raise ctx.err(
                lineno,
                section,
                _key_name_at_start(key_raw),
                "expected 'Key = Value' (the rest of the line is not shown: it may hold a key)",
            )
        key_l = key_raw.lower()
        if key_l in _REFUSED:
            canon, why = _REFUSED[key_l]
            raise ctx.err(lineno, section, canon, why)
        if section is None:
            raise ctx.err(lineno, None, key_raw, "outside of any section (put [Interface] or [Peer] first)")
        table = _INTERFACE_KEYS if section == "Interface" else _PEER_KEYS
        key = table.get(key_l)
        if key is None:
            other = _PEER_KEYS if section == "Interface" else _INTERFACE_KEYS
            hint = ""
            if key_l in other:
                hint = f" (it belongs in [{'Peer' if section == 'Interface' else 'Interface'}])"
            raise ctx.err(lineno, section, key_raw, "unknown key" + hint)
        if key not in _MULTI_KEYS and key in cur:
            raise ctx.err(lineno, section, key, f"given twice (first on line {cur_lines[key]})")
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
            warnings.append(
                f"{path}:{lineno}: [Interface] DNS is ignored by vpncrypt; "
                "configure resolvers separately (e.g. resolvectl)"
            )

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
            raise ctx.err(
                lines["PublicKey"],
                "Peer",
                "PublicKey",
                f"the same peer is already defined on line {first_line[pk]} "
                "(wg would merge the two [Peer] sections; vpncrypt refuses)",
            )
        first_line[pk] = header
        if own_public is not None and pk == own_public:
            warnings.append(
                f"{path}:{lines['PublicKey']}: [Peer] PublicKey: is this "
                "interface's own public key; the peer is ignored (as wg does)"
            )
            continue
        allowed = []
        for net in vals.get("AllowedIPs", []):
            if net not in allowed:
                allowed.append(net)
        out_peers.append(
            PeerConfig(
                public_key=pk,
                preshared_key=vals.get("PresharedKey"),
                allowed_ips=tuple(allowed),
                endpoint=vals.get("Endpoint"),
                persistent_keepalive=vals.get("PersistentKeepalive", 0),
                line=header,
                lines=dict(lines),
            )
        )
    cfg = Config(interface=interface, peers=tuple(out_peers), path=path, warnings=tuple(warnings))
    log.debug("parsed %s: %r, %d peer(s)", path, cfg.interface, len(cfg.peers))
    for p in cfg.peers:
        log.debug("  peer %r", p)
    return cfg


def _parse_list(value: str, parse: Callable[[str], Any], what: str) -> list:
    """Each item of a comma list through `parse`; the first bad one is named."""
    out = []
    for item in value.split(","):
        try:
            out.append(parse(item))
        except ValueError as e:
            raise ValueError(f"'{item}' is not {what} ({e})") from None
    return out


# What to put where an example config has a placeholder or a published key
_KEY_ADVICE = {
    "PrivateKey": "generate one with `umask 077; wg genkey` (its public key: `wg pubkey`)",
    "PublicKey": "put the peer's own public key here (`wg pubkey` prints it from the peer's private key)",
    "PresharedKey": "generate one with `umask 077; wg genpsk` (the same on both peers), or remove the line",
}


def _is_placeholder(value: str) -> bool:
    """``<ANYTHING>``, as the example configs mark what the operator fills
    in (`wg` refuses it as a malformed key; so would vpncrypt, but without
    saying why)."""
    return len(value) > 2 and value.startswith("<") and value.endswith(">")


def _parse_key(key: str, value: str):
    if _is_placeholder(value):
        raise ValueError(f"a placeholder, not a key: {_KEY_ADVICE[key]}")
    cls = {"PrivateKey": PrivateKey, "PublicKey": PublicKey, "PresharedKey": PresharedKey}[key]
    try:
        parsed = cls.from_base64(value)
    except KeyFormatError as e:
        # never echo the value: it may be (a mangled) secret
        tool = {"PrivateKey": "wg genkey", "PublicKey": "wg pubkey", "PresharedKey": "wg genpsk"}[key]
        raise ValueError(f"{e} (44 characters of base64, as printed by `{tool}`)") from None
    if is_published_private(parsed) if key == "PrivateKey" else is_published(parsed):
        raise ValueError(
            "a key from vpncrypt's example configs (published, so anyone holds its secret), "
            f"not a key of yours: {_KEY_ADVICE[key]}"
        )
    return parsed


def _parse_value(key: str, value: str):
    if key in ("PrivateKey", "PublicKey", "PresharedKey"):
        return _parse_key(key, value)
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
        return _parse_list(value, parse_network, "an IP network") if value else []
    if key == "Address":
        return _parse_list(value, parse_interface, "an IP address with an optional /prefix")
    if key == "DNS":
        return [item for item in value.split(",") if item]
    if key == "Table":
        v = value.lower()
        if v == "auto":
            return None
        if v == "off":
            return "off"
        if _digits(value):
            if 0 < int(value) < 1 << 32:
                return int(value)
        elif value in table_names():
            return value  # `ip` would fail on any other name, after the interface is up
        raise ValueError(
            f"'{value}' is not 'off', 'auto', a table number (1-4294967295) "
            "or a table name from iproute2's rt_tables files"
        )
    raise AssertionError(key)  # pragma: no cover


def read_config_file(path: str) -> tuple[bytes, os.stat_result]:
    """A config file's bytes and its stat (for the secret-file check);
    ConfigError if it cannot be opened or is not a regular file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as e:
        raise ConfigError(f"{path}: cannot open: {e.strerror}", path=path) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{path}: not a regular file", path=path)
        with os.fdopen(fd, "rb", closefd=False) as f:
            return f.read(), st
    finally:
        os.close(fd)


def load_config(path: str | os.PathLike) -> Config:
    """Read and parse ``path``. Refuses a file holding a PrivateKey or
    PresharedKey that group/others can read, or that another user owns."""
    from ..permissions import secret_file_problem

    path = os.fspath(path)
    data, st = read_config_file(path)
    cfg = parse_config(data, path)
    has_secret = cfg.interface.private_key is not None or any(p.preshared_key is not None for p in cfg.peers)
    if has_secret:
        problem = secret_file_problem(path, st)
        if problem:
            raise ConfigError(problem, path=path)
    return cfg
