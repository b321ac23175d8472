"""The metrics server's TLS and basic authentication, from the web
configuration file the Prometheus exporters share (exporter-toolkit's
``--web.config.file``, YAML; `vpncrypt up --metrics-web-config FILE`).

What vpncrypt takes of that format:

    tls_server_config:
      cert_file: FILE            # PEM; both or neither
      key_file: FILE             # PEM; refused if group or others can read it
      client_auth_type: NoClientCert | VerifyClientCertIfGiven | RequireAndVerifyClientCert
      client_ca_file: FILE       # needed by the two that verify
      min_version: TLS12         # TLS10 .. TLS13 (default TLS12)
      max_version: TLS13
    http_server_config:
      http2: true|false          # accepted; the server speaks HTTP/1.1 only
      headers: {Content-Security-Policy: ..., X-Frame-Options: ..., X-Content-Type-Options: ...,
                X-XSS-Protection: ..., Strict-Transport-Security: ...}
    basic_auth_users:
      NAME: BCRYPT-HASH          # e.g. `htpasswd -nBC 10 "" | tr -d ':\\n'`

Any other key, and the format's keys vpncrypt does not implement (inline
cert/key/client_ca, client_allowed_sans, cipher_suites, curve_preferences,
prefer_server_cipher_suites, rate_limit, RequestClientCert and
RequireAnyClientCert), are refused with one line naming the file: a security
setting silently ignored would be worse.  Unlike the exporters, the file is
read once, at start.  A file with basic_auth_users holds secrets (bcrypt
hashes can be attacked offline), so, like the config file, it is refused
if group or others can access it.  A key given twice at any level is
refused (YAML wants keys unique; PyYAML would keep the last silently, and
a second `tls_server_config:` left empty would turn TLS off), and so is a
file over 1 MiB or nested past what the parser can follow.

A bcrypt hash is `$2a$`, `$2b$` or `$2y$`, a two-digit cost from 04 to 17,
`$`, and 53 characters of `./A-Za-z0-9`.  17 is the highest cost htpasswd
makes: each step doubles the time of a check (about 50 ms at cost 10 on a
2020 core, so some 6 s at 17 and a day at 31), and a check holds the one
bcrypt slot every unauthenticated request waits for.

Basic auth as exporter-toolkit does it: a request without a parseable
`Authorization: Basic` header is answered 401 at once, with no bcrypt;
one bcrypt check runs at a time; verdicts are cached (100 of them) keyed by
an HMAC, under a key made at start, of the user, the hash and the password
(the password itself is never kept).
"""

from __future__ import annotations

import base64
import binascii
import collections
import dataclasses
import hashlib
import hmac
import logging
import os
import re
import ssl
import threading
import time
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any, Optional

from ..permissions import secret_file_problem

if TYPE_CHECKING:
    import yaml


log = logging.getLogger("vpncrypt.daemon")

MAX_FILE = 1 << 20  # bytes: a web config is a few hundred; more is a mistake
MAX_COST = 17  # htpasswd's highest bcrypt cost (-C 4..17)
MAX_PASSWORD = 72  # bytes bcrypt reads of a password: a longer one is refused, not cut
CACHE = 100  # verdicts kept (exporter-toolkit keeps 100 too)
WARN_EVERY = 60.0  # seconds between two log lines about a hash bcrypt refuses
_BCRYPT = re.compile(r"\$2[aby]\$([0-9]{2})\$[./A-Za-z0-9]{53}")


class WebConfigError(ValueError):
    """A web config that cannot be used: one line naming the file."""


_TOP_KEYS = {"tls_server_config", "http_server_config", "basic_auth_users"}
_TLS_KEYS = {
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "min_version",
    "max_version",
}
_TLS_UNSUPPORTED = frozenset(
    {
        "cert",
        "key",
        "client_ca",
        "client_allowed_sans",
        "cipher_suites",
        "curve_preferences",
        "prefer_server_cipher_suites",
    }
)
_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
# Go's tls.ClientAuthType names as the format spells them: Python's ssl
# verifies every certificate it takes, so the two that take one unverified
# cannot be had
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_HEADERS = (
    "Content-Security-Policy",
    "X-Frame-Options",
    "X-Content-Type-Options",
    "X-XSS-Protection",
    "Strict-Transport-Security",
)


@dataclasses.dataclass(frozen=True)
class WebConfig:
    path: str
    tls: Optional[ssl.SSLContext] = None
    users: Optional[dict[str, bytes]] = None  # name -> bcrypt hash; None: no authentication
    headers: tuple[tuple[str, str], ...] = ()  # (name, value) added to every answer
    verdicts: Optional["Verdicts"] = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.users is not None and self.verdicts is None:
            object.__setattr__(self, "verdicts", Verdicts(self.users))

    def quick_verdict(self, authorization: Optional[str]) -> Optional[bool]:
        """The verdict when it needs no bcrypt (no users, no credentials, a
        password too long, a cached one), else None: call authorized()."""
        if self.verdicts is None:
            return True
        return self.verdicts.quick(authorization)

    def authorized(self, authorization: Optional[str]) -> bool:
        """Whether an Authorization header value passes basic_auth_users
        (always, without them).  A bcrypt check takes tens of milliseconds
        at cost 10: call it off the loop."""
        if self.verdicts is None:
            return True
        return self.verdicts.check(authorization)


class Verdicts:
    """basic_auth_users' verdicts: one bcrypt check at a time, the verdicts
    cached by (user, hash, password) under an HMAC key made here."""

    def __init__(self, users: dict[str, bytes]) -> None:
        self.users = users
        self._key = os.urandom(32)
        self._cache: collections.OrderedDict[bytes, bool] = collections.OrderedDict()
        self._bcrypt = threading.Lock()  # one check at a time (a core at most)
        self._cache_lock = threading.Lock()  # read on the loop, written on a thread
        self._warned = -WARN_EVERY

    def _parse(self, authorization: Optional[str]) -> Optional[tuple[str, Optional[bytes], bytes, bytes]]:
        """(user, hash, password bytes, cache key), or None for a request
        that fails without bcrypt."""
        user, password = _basic_credentials(authorization)
        if user is None:
            return None
        secret = password.encode()
        if len(secret) > MAX_PASSWORD:
            return None
        # an unknown user is checked against some user's hash all the same
        # (a wrong name takes as long as a wrong password), with a verdict of no
        hashed = self.users.get(user)
        mac = hmac.new(self._key, digestmod=hashlib.sha256)
        for part in (user.encode(), hashed or b"", secret):
            mac.update(len(part).to_bytes(4, "big") + part)
        return user, hashed, secret, mac.digest()

    def quick(self, authorization: Optional[str]) -> Optional[bool]:
        parsed = self._parse(authorization)
        if parsed is None:
            return False
        with self._cache_lock:
            return self._cache.get(parsed[3])

    def check(self, authorization: Optional[str]) -> bool:
        parsed = self._parse(authorization)
        if parsed is None:
            return False
        user, hashed, secret, key = parsed
        with self._bcrypt:
            with self._cache_lock:
                verdict = self._cache.get(key)
            if verdict is None:
                verdict = self._bcrypt_check(user, hashed, secret)
                with self._cache_lock:
                    self._cache[key] = verdict
                    while len(self._cache) > CACHE:
                        self._cache.popitem(last=False)  # the oldest
            return verdict

    def _bcrypt_check(self, user: str, hashed: Optional[bytes], secret: bytes) -> bool:
        import bcrypt

        name, against = (user, hashed) if hashed is not None else next(iter(self.users.items()))
        try:
            ok = bcrypt.checkpw(secret, against)
        except ValueError as e:
            # a hash bcrypt will not read (the format was checked at load):
            # 401, and one line a minute at most
            now = time.monotonic()
            if now - self._warned >= WARN_EVERY:
                self._warned = now
                log.error(
                    "metrics: basic_auth_users.%s: bcrypt cannot use the hash (%s); answering 401", name, e
                )
            return False
        return ok and hashed is not None


def _basic_credentials(authorization: Optional[str]) -> tuple[Optional[str], str]:
    """(user, password) of an ``Authorization: Basic ...`` value, or (None, "")."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    if scheme.lower() != "basic":
        return None, ""
    try:
        text = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None, ""
    user, sep, password = text.partition(":")
    return (user, password) if sep else (None, "")


def load_web_config(path: str) -> WebConfig:
    """The file at `path`, checked; WebConfigError with one line otherwise."""
    import yaml

    try:
        with open(path, "rb") as f:
            st = os.fstat(f.fileno())
            text = f.read(MAX_FILE + 1)
        if len(text) > MAX_FILE:
            raise WebConfigError(f"{path}: larger than {MAX_FILE} bytes; a web config is a few hundred")
        data = yaml.load(text, Loader=_unique_key_loader())  # noqa: S506 - a SafeLoader
    except OSError as e:
        raise WebConfigError(f"{path}: cannot read: {e.strerror}") from None
    except RecursionError:
        raise WebConfigError(f"{path}: nested too deeply to be read") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        raise WebConfigError(f"{where}: not valid YAML ({getattr(e, 'problem', None) or e})") from None
    if data is None:
        data = {}
    _mapping(path, "the file", data)
    _known(path, "", data, _TOP_KEYS, frozenset({"rate_limit"}))
    users = _users(path, data.get("basic_auth_users"))
    if users is not None:
        problem = secret_file_problem(path, st, what="password hashes (basic_auth_users)")
        if problem:
            raise WebConfigError(problem)
    tls = _tls(path, data["tls_server_config"]) if data.get("tls_server_config") is not None else None
    headers = _http(path, data.get("http_server_config"))
    return WebConfig(path=path, tls=tls, users=users, headers=headers)


def _unique_key_loader() -> type[yaml.SafeLoader]:
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        """SafeLoader that refuses a key given twice in one mapping."""

        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Hashable, Any]:
            if isinstance(node, yaml.MappingNode):
                seen: set[Any] = set()
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":
                        continue
                    key = self.construct_object(key_node, deep=False)
                    try:
                        again = key in seen
                        seen.add(key)
                    except TypeError:
                        continue  # unhashable: the constructor refuses it next
                    if again:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"key {key} already set", key_node.start_mark
                        )
            return super().construct_mapping(node, deep=deep)

    return UniqueKeyLoader


def _mapping(path: str, what: str, value: Any) -> None:
    if not isinstance(value, dict):
        raise WebConfigError(f"{path}: {what} must be a mapping of keys to values")


def _known(
    path: str, section: str, data: dict[str, Any], known: set[str], unsupported: frozenset[str] = frozenset()
) -> None:
    where = f"{section}." if section else ""
    for key in data:
        if key in unsupported:
            raise WebConfigError(f"{path}: {where}{key}: not supported by vpncrypt; remove it")
        if key not in known:
            raise WebConfigError(f"{path}: {where}{key}: unknown key")


def _string(path: str, name: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise WebConfigError(f"{path}: {name}: expected a non-empty string")
    return value


def _users(path: str, data: Any) -> Optional[dict[str, bytes]]:
    if data is None:
        return None
    _mapping(path, "basic_auth_users", data)
    users: dict[str, bytes] = {}
    for name, hashed in data.items():
        user = _string(path, "basic_auth_users", name)
        text = _string(path, f"basic_auth_users.{user}", hashed)
        if ":" in user:
            raise WebConfigError(f"{path}: basic_auth_users.{user}: a user name cannot hold ':'")
        form = _BCRYPT.fullmatch(text)
        if form is None:
            # never echo the value: it may be a password written in clear
            raise WebConfigError(
                f"{path}: basic_auth_users.{user}: not a bcrypt hash ($2a$, $2b$ or $2y$, a two-digit "
                "cost, $, 53 characters of ./A-Za-z0-9; make one with "
                "`htpasswd -nBC 10 \"\" | tr -d ':\\n'`)"
            )
        cost = int(form.group(1))
        if not 4 <= cost <= MAX_COST:
            raise WebConfigError(
                f"{path}: basic_auth_users.{user}: bcrypt cost {cost} is outside 4-{MAX_COST} (each step "
                f"doubles a check's time: 17 takes seconds, 31 days; htpasswd makes 4-17)"
            )
        users[user] = text.encode()
    return users or None


def _tls(path: str, data: Any) -> ssl.SSLContext:
    _mapping(path, "tls_server_config", data)
    _known(path, "tls_server_config", data, _TLS_KEYS, _TLS_UNSUPPORTED)
    t = {k: _string(path, f"tls_server_config.{k}", v) for k, v in data.items()}
    if "cert_file" not in t or "key_file" not in t:
        raise WebConfigError(f"{path}: tls_server_config: needs both cert_file and key_file")
    base = os.path.dirname(os.path.abspath(path))
    files = {k: os.path.join(base, v) for k, v in t.items() if k.endswith("_file")}
    for v in ("min_version", "max_version"):
        if v in t and t[v] not in _VERSIONS:
            raise WebConfigError(
                f"{path}: tls_server_config.{v}: {t[v]!r} is not one of {', '.join(_VERSIONS)}"
            )
    auth = t.get("client_auth_type", "NoClientCert")
    if auth not in _CLIENT_AUTH:
        raise WebConfigError(
            f"{path}: tls_server_config.client_auth_type: {auth!r} is not supported "
            f"(use one of {', '.join(_CLIENT_AUTH)})"
        )
    if _CLIENT_AUTH[auth] != ssl.CERT_NONE and "client_ca_file" not in files:
        raise WebConfigError(f"{path}: tls_server_config.client_auth_type {auth} needs client_ca_file")
    _check_key_file(path, files["key_file"])
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = _VERSIONS[t.get("min_version", "TLS12")]
    ctx.maximum_version = _VERSIONS[t.get("max_version", "TLS13")]
    try:
        ctx.load_cert_chain(files["cert_file"], files["key_file"])
        if "client_ca_file" in files:
            ctx.load_verify_locations(cafile=files["client_ca_file"])
    except (OSError, ssl.SSLError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else getattr(e, "reason", None) or str(e)
        raise WebConfigError(f"{path}: tls_server_config: cannot load the certificates: {why}") from None
    ctx.verify_mode = _CLIENT_AUTH[auth]
    return ctx


def _check_key_file(path: str, key_file: str) -> None:
    try:
        st = os.stat(key_file)
    except OSError as e:
        raise WebConfigError(f"{path}: tls_server_config.key_file: {key_file}: {e.strerror}") from None
    problem = secret_file_problem(key_file, st, what="a TLS private key")
    if problem:
        raise WebConfigError(f"{path}: tls_server_config.key_file: {problem}")


def _http(path: str, data: Any) -> tuple[tuple[str, str], ...]:
    if data is None:
        return ()
    _mapping(path, "http_server_config", data)
    _known(path, "http_server_config", data, {"http2", "headers"})
    if "http2" in data and not isinstance(data["http2"], bool):
        raise WebConfigError(f"{path}: http_server_config.http2: expected true or false")
    headers = data.get("headers") or {}
    _mapping(path, "http_server_config.headers", headers)
    out: list[tuple[str, str]] = []
    for name, value in headers.items():
        if name not in _HEADERS:
            raise WebConfigError(f"{path}: http_server_config.headers.{name}: unknown header")
        if value in (None, ""):
            continue  # "unset if blank"
        text = _string(path, f"http_server_config.headers.{name}", value)
        if "\r" in text or "\n" in text:
            raise WebConfigError(f"{path}: http_server_config.headers.{name}: a header value is one line")
        out.append((name, text))
    return tuple(out)
