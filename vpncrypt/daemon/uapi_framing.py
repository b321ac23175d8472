"""How the UAPI server reads a request off its socket: the operation line,
then a ``set=1`` body up to its blank line, in pieces of the stream's
buffer (not a line at a time: 18 million lines are 18 million trips through
the event loop, which carries the data plane).

Framing as wireguard-go's: the operation is the first line and is judged as
soon as it is read (whole: ``set=1\\r\\n`` is no operation); a line of 64 KiB
or more is EIO (its line scanner's limit, bufio.MaxScanTokenSize).  That
scanner (Go's bufio.ScanLines) drops one "\\r" at the end of a body's line:
"\\r\\n" alone is a blank line too, and ends the body, after lines ending in
"\\n" or "\\r\\n" alike.  The body's end is looked for in the stream's buffer
before anything is taken from it, so that the next request stays there.  A
body is read whole before it is parsed (a request is applied whole or not
at all), with bounds wireguard-go, which applies each line as it reads it,
needs no bound for:

* a line that no parser takes in any place (no ``key=`` of the set keys
  at its start), read before the body's end, ends the reading there: the
  body up to that line is answered at once (parse_set fails on it, or on
  an earlier line, as it would on the whole body) and the connection
  closed (a CutBody), as wireguard-go answers at that line and then hangs
  up on the rest (it reads the rest as operations);
* before waiting for more of a body, the server checks its last lines
  (CHECK_LINES, with parse_set): a bad one is answered at once in the
  same way, where waiting for the blank line would answer only at the
  request timeout;
* the bodies held at once, across every client, are at most
  MAX_BODY_BYTES together (a BodyBudget): past it, ENOMEM."""

from __future__ import annotations

import asyncio
import errno
import re
from typing import Callable, Optional, Union

# A set request's body is read whole before it is checked.  wireguard-go
# reads without a bound; this one (about 18 million allowed_ip lines) is far
# above any configuration seen, and above it the answer is ENOMEM.  It bounds
# every client's bodies together (BodyBudget), not each one's.
MAX_BODY_BYTES = 512 * 1024 * 1024
# wireguard-go's bufio.Scanner: a line (without its newline) of 64 KiB or more
# fails the request with EIO.
LINE_LIMIT = 64 * 1024

# Every key parse_set takes, in some place: a line starting with none of them
# is refused there whatever came before.
SET_KEYS = (
    "private_key",
    "listen_port",
    "fwmark",
    "replace_peers",
    "public_key",
    "preshared_key",
    "endpoint",
    "persistent_keepalive_interval",
    "replace_allowed_ips",
    "allowed_ip",
    "update_only",
    "remove",
    "protocol_version",
)
# a whole line (with its newline) that starts with no key of SET_KEYS
_NO_KEY = re.compile(rb"^(?!(?:%s)=)[^\n]*\n" % b"|".join(k.encode() for k in SET_KEYS), re.M)
_LONG = re.compile(rb"[^\n]{%d}" % LINE_LIMIT)
# Before waiting for more of a body, its last lines are checked (parse_set)
# up to this many: a peer's worth, whose check costs about 30 us; checking
# every line as it comes would parse a 100 MB body twice, once on the loop.
CHECK_LINES = 16
_PEER_LINE = re.compile(rb"^public_key=", re.M)

_GET_OPS = (b"get=1\n", b"get=vpncrypt\n")


# check(lines, in_peer): whether these whole lines of a set body would parse
# (after a peer's public_key line if in_peer)
LineCheck = Callable[[bytes, bool], bool]


class CutBody(str):
    """A set body cut after its first line that no parser takes: answered
    (it fails to parse), and then the connection is closed, since the rest
    of the request was never read."""


class BodyBudget:
    """The bytes of set bodies held at once across every client, from the
    first piece read until the request is answered (give() then)."""

    def __init__(self, limit: int = MAX_BODY_BYTES) -> None:
        self.limit = limit
        self.held = 0

    def take(self, n: int) -> bool:
        if self.held + n > self.limit:
            return False
        self.held += n
        return True

    def give(self, n: int) -> None:
        self.held -= n


async def _read_line(reader: asyncio.StreamReader) -> Optional[bytes]:
    """One line with its newline; b"" at EOF; the partial line at EOF
    without a newline; None if a line exceeds the stream's limit."""
    try:
        return await reader.readline()
    except (asyncio.LimitOverrunError, ValueError):
        return None


# read_request's answer: (operation, body: str, or a CutBody), or (None, errno)
Request = Union[tuple[str, str], tuple[None, int]]
# read_body's: the body, an errno, or ("cut", the body up to the cut)
Body = Union[bytes, int, tuple[str, bytes]]


async def read_request(
    reader: asyncio.StreamReader, budget: Optional[BodyBudget] = None, check: Optional[LineCheck] = None
) -> Optional[Request]:
    """(op_line, body) for one request; None at EOF; (None, errno) if the
    request cannot be read (the connection is then closed).  A body the
    budget had to hold is in it until the caller gives len(body) back.
    `check(lines, in_peer)`: whether a set body's last lines would parse
    (read_body).

    A client that sends an unknown operation (``get=1\\r\\n`` too) is
    answered errno=-22 at once and the connection closed (wireguard-go
    closes it without an answer).  ``get`` must be followed by the blank line
    at once.  A ``set=1`` body ends at the blank line ("\\n" or "\\r\\n") or at
    EOF: a client that half-closes without the blank line still gets its
    request applied (and answered).  Blank lines (also "\\r\\n") between
    requests are skipped."""
    while True:
        op = await _read_line(reader)
        if op is None:
            return None, errno.EINVAL
        if not op:
            return None  # EOF between requests
        if op.strip(b"\r\n"):
            break
    if not op.endswith(b"\n"):
        return None  # EOF in the middle of the operation line
    if op in _GET_OPS:
        try:
            nxt = await reader.readexactly(1)
        except asyncio.IncompleteReadError:
            return None
        if nxt == b"\n":
            return op[:-1].decode(), ""
        skipped = await read_body(reader, first=nxt)  # get takes no arguments: skip them, refuse it
        return (op[:-1].decode(), "\x00") if isinstance(skipped, bytes) else (None, errno.EINVAL)
    if op != b"set=1\n":
        return None, errno.EINVAL
    body = await read_body(reader, budget, check=check)
    if isinstance(body, int):
        return None, body
    # Non-ASCII bytes are kept (as surrogates) to be judged like any other
    # text: a line without '=' is EPROTO, a key or value no parser takes EINVAL.
    if isinstance(body, tuple):
        return "set=1", CutBody(body[1].decode("ascii", "surrogateescape"))
    return "set=1", body.decode("ascii", "surrogateescape")


async def read_body(
    reader: asyncio.StreamReader,
    budget: Optional[BodyBudget] = None,
    *,
    first: bytes = b"",
    check: Optional[LineCheck] = None,
) -> Body:
    """The lines after the operation up to the blank line ("\\n" or "\\r\\n",
    not kept) or EOF (bytes, the last line given its newline if EOF cut it;
    the lines' "\\r" are kept, for parse_set); ("cut", bytes) for a body
    read up to its first line no parser takes (see CutBody), or up to
    lines `check` refused (called with the body's last complete lines and
    whether a peer's public_key line is before them, before waiting for
    the client); or an errno:
    EIO for a line over LINE_LIMIT, ENOMEM past MAX_BODY_BYTES or the budget.
    `first`: bytes of the body already read.  The budget keeps what is
    returned (the caller gives it back) and nothing else, whatever happens
    (a timeout cancels the reading)."""
    held = [0]
    try:
        got = await _read_pieces(reader, budget, first, held, check)
    except BaseException:
        if budget is not None:
            budget.give(held[0])
        raise
    if budget is not None:
        kept = len(got) if isinstance(got, bytes) else len(got[1]) if isinstance(got, tuple) else 0
        budget.give(held[0] - kept)
    return got


def _buffered(reader: asyncio.StreamReader) -> bytearray:
    """What the stream holds that has not been read yet.  StreamReader has
    no peek: the body's end ("\n\r\n" among "\n\n", which one readuntil
    cannot look for before Python 3.13) is found in the buffer first, so that
    no byte past it (the next request's) is taken."""
    buffered: bytearray = reader._buffer  # type: ignore[attr-defined]  # private: asyncio has no peek
    return buffered


def _terminator(s: bytes) -> int:
    """Where in s (the stream from a line's end on) the blank line's
    preceding newline is: the first "\n\n" or "\n\r\n"; -1 if none."""
    a, b = s.find(b"\n\n"), s.find(b"\n\r\n")
    return a if b < 0 or 0 <= a < b else b


class _Pieces:
    """The stream after the operation line, taken a piece at a time up to
    the blank line that ends the body.  `hold`: bytes taken but not yet
    given out, which could begin that blank line with what comes next
    ("\n", "\n\r"); it starts as the operation line's newline, which is
    not the body's."""

    def __init__(self, first: bytes) -> None:
        self.hold = b"\n"
        self.virtual = True  # hold[0] is the operation line's newline
        self.first = first
        self.done = False

    def _give(self, s: bytes, n: int) -> bytes:
        """s[:n] as body bytes (without the operation line's newline)."""
        out = s[:n]
        if out and self.virtual:
            out, self.virtual = out[1:], False
        return out

    def take(self, new: bytes) -> tuple[bytes, int]:
        """(body bytes, how many of `new` belong to the body or its blank
        line: the rest is left in the stream)."""
        s = self.hold + new
        end = _terminator(s)
        if end >= 0:
            self.done = True
            blank = 2 if s[end + 1 : end + 2] == b"\n" else 3
            self.hold = b""
            return self._give(s, end + 1), end + blank - (len(s) - len(new))
        h = 2 if s.endswith(b"\n\r") else 1 if s.endswith(b"\n") else 0
        self.hold = s[len(s) - h :]
        return self._give(s, len(s) - h), len(new)

    def at_eof(self) -> bytes:
        """The body's last bytes at EOF: a last line cut by EOF is given
        its newline; a last line "\r" is blank (Go's ScanLines drops the
        "\r" at EOF too)."""
        self.done = True
        hold, self.hold = self.hold, b""
        if not hold:  # the stream ended inside a line (not in a blank one: then it was held)
            return b"\n"
        hold = hold[:1]  # "\n", the last line's; or "\n\r": then a blank line after it
        return self._give(hold, len(hold))

    async def next(self, reader: asyncio.StreamReader, stalled: Callable[[], bool]) -> bytes:
        """The next piece of the body (maybe empty); self.done at its end.
        `stalled()` is called before waiting for bytes not yet sent."""
        if self.first:
            first, self.first = self.first, b""
            got, _ = self.take(first)
            return got
        buf = _buffered(reader)
        if buf:
            # a piece at most the stream's limit (the server's: 64 KiB), so
            # that a line no parser takes ends the reading within that much
            got, used = self.take(bytes(buf[: reader._limit]))  # type: ignore[attr-defined]
            await reader.readexactly(used)  # buffered: taken at once
            return got
        if stalled():
            return b""
        try:
            one = await reader.readexactly(1)  # waits for the client
        except asyncio.IncompleteReadError:
            return self.at_eof()
        got, _ = self.take(one)
        return got


class _LastLines:
    """What a stall's check reads: the body's last complete lines not
    checked before (at most CHECK_LINES of them), and whether a peer's
    public_key line comes before them (their context in parse_set)."""

    def __init__(self, check: LineCheck) -> None:
        self.check = check
        self.checked_to = 0  # the body's lines before this offset were checked (or skipped)
        self.first_peer: Optional[int] = None  # offset of the first public_key line

    def see(self, window: bytes, at: int) -> None:
        """A window of whole lines and the start of one, at body offset `at`."""
        if self.first_peer is None:
            m = _PEER_LINE.search(window)
            if m is not None:
                self.first_peer = at + m.start()

    def bad(self, pieces: list[bytes], total: int, partial: bytes, ended: bool) -> bool:
        """Whether the last lines fail the check.  `ended`: the partial
        line's newline was read (it is held until the next piece)."""
        upto = total if ended else total - len(partial)
        if upto <= self.checked_to:
            return False
        chunks, size, lines = [], 0, 0
        for p in reversed(pieces):  # back to CHECK_LINES lines, or to what was checked
            chunks.append(p)
            size += len(p)
            lines += p.count(b"\n")
            if lines > CHECK_LINES or total - size <= self.checked_to:
                break
        blob = b"".join(reversed(chunks))
        base = total - len(blob)
        text = blob[max(self.checked_to, base) - base : upto - base]
        if ended:
            text += b"\n"
        whole = text.split(b"\n")[:-1]  # (text ends in a newline)
        text = b"".join(line + b"\n" for line in whole[-CHECK_LINES:])
        start = upto - len(text) + (1 if ended else 0)
        self.checked_to = upto + (1 if ended else 0)  # past the newline still held
        in_peer = self.first_peer is not None and self.first_peer < start
        return not self.check(text, in_peer)


async def _read_pieces(
    reader: asyncio.StreamReader,
    budget: Optional[BodyBudget],
    first: bytes,
    held: list[int],
    check: Optional[LineCheck] = None,
) -> Body:
    """read_body's reading; held[0]: what it took from the budget so far."""
    stream = _Pieces(first)
    last = _LastLines(check or (lambda text, in_peer: True))
    pieces: list[bytes] = []
    total = 0
    partial = b""  # the last piece's line that has not ended yet
    cut = False

    def stalled() -> bool:
        """Before waiting for the client: its last lines checked, so that a
        bad one is answered now, as wireguard-go answers at the line, not at
        the request timeout (the client may be waiting for the answer)."""
        nonlocal cut
        if check is not None:
            ended = stream.hold.startswith(b"\n") and not stream.virtual
            cut = last.bad(pieces, total, partial, ended)
        return cut

    while True:
        piece = await stream.next(reader, stalled)
        if cut:
            return "cut", b"".join(pieces)
        if total + len(piece) > MAX_BODY_BYTES or (budget is not None and not budget.take(len(piece))):
            return errno.ENOMEM
        window = partial + piece
        last.see(window, total - len(partial))
        total += len(piece)
        held[0] = total
        if _LONG.search(window):
            return errno.EIO
        end = window.rfind(b"\n") + 1
        bad = _NO_KEY.search(window, 0, end)
        if bad is not None and not stream.done:  # answered at once, as wireguard-go answers at the line
            pieces.append(piece[: bad.end() - len(partial)])
            return "cut", b"".join(pieces)
        partial = window[end:]
        pieces.append(piece)
        if stream.done:
            return b"".join(pieces)
        await asyncio.sleep(0)  # pieces already buffered are read without a pause: make one
