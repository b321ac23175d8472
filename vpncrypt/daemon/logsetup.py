"""Logging to stderr: journald-friendly ``<N>`` syslog-priority prefixes when
stderr is the journal (JOURNAL_STREAM matches), plain lines otherwise.

Every line goes through redact(): anything shaped like a WireGuard key
(44-character base64 ending in '=', or 64 hex digits) is replaced, so key
material never reaches the log even if code logs it by mistake. Key objects
from vpncrypt.config.keytypes already print as a fingerprint or <redacted>.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from typing import Callable, Mapping, Optional, TextIO, Union

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
    "critical": logging.CRITICAL,
}

_SYSLOG_PRIORITY = [  # (min level, priority)
    (logging.CRITICAL, 2),
    (logging.ERROR, 3),
    (logging.WARNING, 4),
    (logging.INFO, 6),
    (0, 7),
]

_B64_KEY = re.compile(r"(?<![A-Za-z0-9+/])[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=")
_HEX_KEY = re.compile(r"(?<![0-9A-Fa-f])[0-9A-Fa-f]{64}(?![0-9A-Fa-f])")
REDACTED = "<redacted>"


def redact(text: str) -> str:
    text = _B64_KEY.sub(REDACTED, text)
    text = _HEX_KEY.sub(REDACTED, text)
    return text


class RedactingFormatter(logging.Formatter):
    def __init__(self, fmt: str, *, journal: bool = False, datefmt: Optional[str] = None):
        super().__init__(fmt, datefmt=datefmt)
        self.journal = journal

    def format(self, record: logging.LogRecord) -> str:
        text = redact(super().format(record))
        if not self.journal:
            return text
        prio = next(p for lvl, p in _SYSLOG_PRIORITY if record.levelno >= lvl)
        # journald takes the prefix per line
        return "\n".join(f"<{prio}>{line}" for line in text.split("\n"))


class RedactingFilter(logging.Filter):
    """For handlers this module does not create: redacts the message."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        red = redact(msg)
        if red != msg or record.args:
            record.msg, record.args = red, None
        return True


def stderr_is_journal(stream: Optional[TextIO] = None, env: Optional[Mapping[str, str]] = None) -> bool:
    """True if JOURNAL_STREAM names the device:inode of ``stream``."""
    env = os.environ if env is None else env
    value = env.get("JOURNAL_STREAM", "")
    if not value:
        return False
    stream = sys.stderr if stream is None else stream
    try:
        dev, ino = (int(x) for x in value.split(":", 1))
        st = os.fstat(stream.fileno())
    except (ValueError, OSError, AttributeError):
        return False
    return (st.st_dev, st.st_ino) == (dev, ino)


def parse_level(level: Union[int, str]) -> int:
    if isinstance(level, int):
        return level
    try:
        return LEVELS[str(level).lower()]
    except KeyError:
        raise ValueError(f"unknown log level {level!r} (use one of {', '.join(LEVELS)})") from None


def setup_logging(
    level: Union[int, str] = "info",
    *,
    stream: Optional[TextIO] = None,
    journal: Optional[bool] = None,
    env: Optional[Mapping[str, str]] = None,
) -> logging.Handler:
    """Configure the ``vpncrypt`` logger (and the root logger) to write to
    ``stream`` (stderr). ``journal=None`` detects journald via JOURNAL_STREAM.
    Returns the handler. Calling it again replaces the previous handler."""
    lvl = parse_level(level)
    stream = sys.stderr if stream is None else stream
    if journal is None:
        journal = stderr_is_journal(stream, env)
    if journal:
        fmt = RedactingFormatter("%(name)s: %(message)s", journal=True)
    else:
        fmt = RedactingFormatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(fmt)
    handler.addFilter(RedactingFilter())
    handler._vpncrypt = True  # type: ignore[attr-defined]
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_vpncrypt", False):
            root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(lvl)
    logging.getLogger("vpncrypt").setLevel(lvl)
    trace = logging.getLogger("vpncrypt.trace")
    for f in [f for f in trace.filters if isinstance(f, TokenBucketFilter)]:
        trace.removeFilter(f)
    trace.addFilter(TokenBucketFilter())
    logging.captureWarnings(True)
    return handler


def report_failure(
    message: str, stream: Optional[TextIO] = None, env: Optional[Mapping[str, str]] = None
) -> None:
    """A failure that ends the program, as one bare line on stderr: no
    timestamp or logger name (under journald, only the error priority)."""
    stream = sys.stderr if stream is None else stream
    line = redact(" ".join(str(message).split()))
    if stderr_is_journal(stream, env):
        line = "<3>" + line
    stream.write(line + "\n")
    stream.flush()


class RateLimitedLog:
    """Log through `logger` at most once per `interval` seconds; the next
    line that gets through says how many were left out.  For events that an
    outsider can repeat at will (refused connections), so they cannot fill
    the disk."""

    def __init__(
        self, logger: logging.Logger, interval: float = 10.0, clock: Optional[Callable[[], float]] = None
    ) -> None:
        import time

        self.logger = logger
        self.interval = interval
        self.clock = clock or time.monotonic
        self._next = float("-inf")
        self.suppressed = 0

    def log(self, level: int, msg: str, *args: object) -> bool:
        now = self.clock()
        if now < self._next:
            self.suppressed += 1
            return False
        self._next = now + self.interval
        if self.suppressed:
            msg += " (%d similar message%s suppressed)"
            args = (*args, self.suppressed, "" if self.suppressed == 1 else "s")
            self.suppressed = 0
        self.logger.log(level, msg, *args)
        return True

    def warning(self, msg: str, *args: object) -> bool:
        return self.log(logging.WARNING, msg, *args)


class TokenBucketFilter(logging.Filter):
    """Lets through `burst` records at once and `rate` a second after that;
    when records were dropped, the next one that passes says how many.  The
    debug trace of protocol events goes through it: a flood of handshakes
    must not become a flood of log lines."""

    def __init__(
        self, rate: float = 20.0, burst: int = 100, clock: Optional[Callable[[], float]] = None
    ) -> None:
        super().__init__()
        import time

        self.rate = rate
        self.burst = burst
        self.clock = clock or time.monotonic
        self.tokens = float(burst)
        self.last = self.clock()
        self.dropped = 0

    def filter(self, record: logging.LogRecord) -> bool:
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        if self.tokens < 1:
            self.dropped += 1
            return False
        self.tokens -= 1
        if self.dropped:
            record.msg = (
                f"{record.getMessage()} ({self.dropped} trace message"
                f"{'' if self.dropped == 1 else 's'} dropped by the rate limit)"
            )
            record.args = None
            self.dropped = 0
        return True
