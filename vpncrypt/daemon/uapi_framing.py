"""How the UAPI server reads a request off its socket: the operation line,
then a ``set=1`` body up to its blank line, in pieces of the stream's
buffer (not a line at a time: 18 million lines are 18 million trips through
the event loop, which carries the data plane).

Framing as wireguard-go's: the operation is the first line and is judged as
soon as it is read (whole: ``set=1\\r\\n`` is no operation); a line of 64 KiB
or more is EIO (its line scanner's limit, bufio.MaxScanTokenSize).  That
scanner (Go's bufio.ScanLines) drops one "\\r" at the end of a body's line:
"\\r\\n" alone is a blank line too, and ends the body.  A body whose first
line ends in "\\r\\n" is read a line at a time (readuntil takes one
separator before Python 3.13; about 3 times slower than pieces, which `wg`'s
"\\n" bodies keep).  One mix is not taken: a body whose first line ends in
"\\n" and whose blank line is "\\r\\n" after its second line or later waits
for "\\n\\n", EOF or the request timeout.  A body is read whole
before it is parsed (a request is applied whole or not at all), with two
bounds wireguard-go, which applies each line as it reads it, needs no bound
for:

* a line that no parser takes in any place (no ``key=`` of the set keys
  at its start) ends the keeping there: the body up to that line is
  answered (parse_set fails on it, or on an earlier line, as it would on
  the whole body); the rest is read and dropped up to DRAIN_LIMIT, and a
  request longer than that is answered and its connection closed (a
  CutBody), as wireguard-go answers at that line and then hangs up on
  the rest;
* the bodies held at once, across every client, are at most
  MAX_BODY_BYTES together (a BodyBudget): past it, ENOMEM."""

from __future__ import annotations

import asyncio
import errno
import re
from typing import Optional, Union

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
# After a line no parser takes, the rest of its request is read (not kept) up
# to this far: a request that ends within it is answered as any other, on a
# connection that goes on; a longer one is answered and the connection closed.
DRAIN_LIMIT = 1 << 20

_GET_OPS = (b"get=1\n", b"get=vpncrypt\n")
# A blank line: "\n", or "\r\n" (wireguard-go's line scanner, Go's
# bufio.ScanLines, drops a line's final "\r").
_BLANK_LINES = (b"\n", b"\r\n")
# A CRLF body is read a line at a time (readuntil takes one separator before
# Python 3.13), and yields to the loop after this much.
_CRLF_CHUNK = 1 << 16


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


async def read_request(reader: asyncio.StreamReader, budget: Optional[BodyBudget] = None) -> Optional[tuple]:
    """(op_line, body) for one request; None at EOF; (None, errno) if the
    request cannot be read (the connection is then closed).  A body the
    budget had to hold is in it until the caller gives len(body) back.

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
    body = await read_body(reader, budget)
    if isinstance(body, int):
        return None, body
    # Non-ASCII bytes are kept (as surrogates) to be judged like any other
    # text: a line without '=' is EPROTO, a key or value no parser takes EINVAL.
    if isinstance(body, tuple):
        return "set=1", CutBody(body[1].decode("ascii", "surrogateescape"))
    return "set=1", body.decode("ascii", "surrogateescape")


async def read_body(
    reader: asyncio.StreamReader, budget: Optional[BodyBudget] = None, *, first: bytes = b""
) -> Union[bytes, int, tuple]:
    """The lines after the operation up to the blank line ("\\n" or "\\r\\n",
    not kept) or EOF (bytes, the last line given its newline if EOF cut it;
    the lines' "\\r" are kept, for parse_set); ("cut", bytes) for a body
    read up to its first line no parser takes (see CutBody); or an errno:
    EIO for a line over LINE_LIMIT, ENOMEM past MAX_BODY_BYTES or the budget.
    `first`: bytes of the body already read.  The budget keeps what is
    returned (the caller gives it back) and nothing else, whatever happens
    (a timeout cancels the reading)."""
    held = [0]
    try:
        got = await _read_pieces(reader, budget, first, held)
    except BaseException:
        if budget is not None:
            budget.give(held[0])
        raise
    if budget is not None:
        kept = len(got) if isinstance(got, bytes) else len(got[1]) if isinstance(got, tuple) else 0
        budget.give(held[0] - kept)
    return got


async def _read_pieces(
    reader: asyncio.StreamReader, budget: Optional[BodyBudget], first: bytes, held: list
) -> Union[bytes, int, tuple]:
    """read_body's reading; held[0]: what it took from the budget so far."""
    if not first:
        try:
            first = await reader.readexactly(1)
        except asyncio.IncompleteReadError:
            return b""  # EOF: an empty body
    if first == b"\r":  # a blank line "\r\n"?
        try:
            first += await reader.readexactly(1)
        except asyncio.IncompleteReadError:
            return b""  # "\r" and EOF: a blank line too (Go's ScanLines drops the "\r" at EOF)
    if first in (b"\n", b"\r\n"):
        return b""  # the blank line at once: an empty body
    pieces: list[bytes] = []
    total = 0
    partial = b""  # the last piece's line that has not ended yet
    piece = first
    done = False
    crlf = None  # whether the body's first line ends in "\r\n": then it is read by lines
    line_start = True  # a CRLF body's reading stopped at the end of a line
    while True:
        if not done:
            try:
                if crlf is None:  # the first line to its end, then the blank line if it comes at once
                    piece += await reader.readuntil(b"\n")
                    crlf = (partial + piece).endswith(b"\r\n")  # partial: the line's start
                    if not crlf:  # readuntil(b"\n\n") would miss "\n" + "\n": its first is read
                        piece += await reader.readexactly(1)
                        if piece.endswith(b"\n\r"):
                            piece += await reader.readexactly(1)
                        done = piece.endswith((b"\n\n", b"\n\r\n"))
                elif crlf:
                    got, done = await _read_lines(reader, line_start)
                    piece += got
                    line_start = got.endswith(b"\n")
                else:
                    piece += await reader.readuntil(b"\n\n")
                    done = True
            except asyncio.LimitOverrunError as e:
                piece += await reader.readexactly(e.consumed)
            except asyncio.IncompleteReadError as e:
                piece += e.partial
                done = True
                if (piece or partial) and not piece.endswith(b"\n"):
                    piece += b"\n"  # the last line, cut by EOF
        if done:  # the blank line that ends the request is not kept
            k = piece.rfind(b"\n", 0, len(piece) - 1) + 1  # where piece's last line starts
            if piece[k:] in _BLANK_LINES and (k or not partial):
                piece = piece[:k]
        if total + len(piece) > MAX_BODY_BYTES or (budget is not None and not budget.take(len(piece))):
            return errno.ENOMEM
        total += len(piece)
        held[0] = total
        window = partial + piece
        if _LONG.search(window):
            return errno.EIO
        end = window.rfind(b"\n") + 1
        bad = _NO_KEY.search(window, 0, end)
        if bad is not None and not done:  # kept up to the end of that line, the rest drained
            cut = bad.end() - len(partial)
            pieces.append(piece[:cut])
            return await _drain(reader, b"".join(pieces), len(piece) - cut, bool(crlf), line_start)
        partial = window[end:]
        pieces.append(piece)
        if done:
            return b"".join(pieces)
        piece = b""
        await asyncio.sleep(0)  # pieces already buffered are read without a pause: make one


async def _drain(
    reader: asyncio.StreamReader, kept: bytes, drained: int, crlf: bool = False, line_start: bool = True
) -> Union[bytes, tuple]:
    """After a line no parser takes: the rest of the request read and thrown
    away, up to DRAIN_LIMIT.  `kept` (the body up to that line) fails to
    parse with the error the whole body would: returned as the body if the
    request ended within the limit (or at EOF), else as ("cut", kept).
    `drained`: what was read past that line already; crlf, line_start: a
    CRLF body's, read by lines (_read_lines)."""
    while drained <= DRAIN_LIMIT:
        try:
            if not crlf:
                await reader.readuntil(b"\n\n")
                return kept
            got, ended = await _read_lines(reader, line_start)
            if ended:
                return kept
            drained += len(got)
            line_start = got.endswith(b"\n")
        except asyncio.LimitOverrunError as e:
            drained += len(await reader.readexactly(e.consumed))
        except asyncio.IncompleteReadError:
            return kept
    return "cut", kept


async def _read_lines(reader: asyncio.StreamReader, line_start: bool) -> tuple:
    """A CRLF body's next lines: (bytes, True) up to the blank line ("\\n"
    or "\\r\\n", read but not returned), or (bytes, False) after _CRLF_CHUNK
    bytes or at a line longer than the stream's limit (the part of it that
    was buffered).  line_start: the reading before stopped at the end of a
    line (else the first line read is the rest of one, never blank).  EOF
    raises IncompleteReadError with everything read."""
    got = b""
    while len(got) < _CRLF_CHUNK:
        try:
            line = await reader.readuntil(b"\n")
        except asyncio.LimitOverrunError as e:
            return got + await reader.readexactly(e.consumed), False
        except asyncio.IncompleteReadError as e:
            raise asyncio.IncompleteReadError(got + e.partial, None) from None
        if line in _BLANK_LINES and (got or line_start):
            return got, True  # without the blank line
        got += line
    return got, False
