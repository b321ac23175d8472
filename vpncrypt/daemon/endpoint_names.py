"""Peers whose Endpoint line names a host: when each name is looked up,
what an answer does to the peer, and what is reported about it.

A plain state machine, given the time (monotonic seconds) and the lookups'
answers; the daemon runs the lookups in threads (getaddrinfo blocks) and
applies the addresses (vpncrypt.daemon.daemon).  Per peer, a name is

* pending: not found yet (the resolver failed or is not there yet): looked
  up again after 1, 2, 4, 8, 16 s, then every 30 s (RETRY_*);
* failed: the resolver said five times in a row, over 15 s, that the name
  does not exist (NXDOMAIN, or no address of a usable family): one line is
  logged and the name is looked up every 5 minutes (FAILED_RETRY);
* resolved: its address was found.  It is looked up again only while the
  peer's handshake is failing, with the same backoff, and the peer follows
  a new address without a reload.

A lookup that has not answered within LOOKUP_LIMIT (a hung NSS module, a
resolver that never answers under a long resolv.conf timeout) is abandoned:
it counts as a lookup that found nothing (the backoff goes on), and its
answer, should it ever come, is an answer to an older question: dropped.

"Failing" is an initiation that has had no handshake after it, and nothing
heard from the peer, for REKEY_TIMEOUT plus its jitter (the `patience`
given): by then the first retry has gone to the same address, so one lost
packet is not taken for a move, and a moved peer is followed within
seconds (the lookups are once a second at most, by the daemon's round).  (contrib/reresolve-dns.sh waits
for a handshake older than 135 s because all a cron job can read is the
latest handshake, which an idle peer's is too; the daemon sees the
initiations that go unanswered.)  A peer whose handshake works is never
moved: an address found is applied only to a peer that is failing, or
that has had no handshake since the name was configured (so a peer that
roamed in at an address that works keeps it).
"""

from __future__ import annotations

import dataclasses
import errno
import logging
import socket
from typing import Any, Optional, Union

from ..config.keytypes import fingerprint
from ..endpoints import Endpoint, format_endpoint

PENDING, RESOLVED, FAILED = "pending", "resolved", "failed"

RETRY_FIRST = 1.0  # seconds from a lookup that found nothing to the next; doubled each time
RETRY_CAP = 30.0  # ... up to this: a resolver that comes up late is used within 30 s
MISSING_LIMIT = 5  # "no such name" answers in a row (over 1+2+4+8 = 15 s) before the name is failed
FAILED_RETRY = 300.0  # a failed name is looked up every 5 minutes (it may be registered later)
# A lookup not answered in this long is abandoned.  glibc's resolver with
# resolv.conf's defaults (timeout 5 s, attempts 2) gives up on a server that
# never answers after 10 s, and on three (MAXNS) after about 30 s: a
# resolver that answers at all has answered by then (the A and AAAA queries
# go out together).  Only a hung NSS module, or a resolv.conf with a longer
# timeout, takes longer.
LOOKUP_LIMIT = 30.0

# What getaddrinfo says when the name has no address (as opposed to a
# resolver that could not answer: EAI_AGAIN, EAI_FAIL, timeouts).
_MISSING = {socket.EAI_NONAME, getattr(socket, "EAI_NODATA", socket.EAI_NONAME)}
_MISSING.add(getattr(socket, "EAI_ADDRFAMILY", socket.EAI_NONAME))

Found = Union[tuple[Any, ...], OSError]  # an address (host, port[, flowinfo, scope]), or why there is none


class NoAnswer(OSError):
    """A lookup abandoned: the resolver had not answered within LOOKUP_LIMIT."""

    def __init__(self) -> None:
        super().__init__(errno.ETIMEDOUT, f"no answer from the resolver within {LOOKUP_LIMIT:g} s")


def says_missing(error: OSError) -> bool:
    """The resolver answered that the name has no address (rather than
    failing to answer).  vpncrypt.endpoints.resolve_endpoint raises its own
    OSError with getaddrinfo's error as the context."""
    for e in (error, error.__cause__, error.__context__):
        if isinstance(e, socket.gaierror) and e.errno in _MISSING:
            return True
    return False


@dataclasses.dataclass
class Name:
    """One peer's name and what is known of it."""

    endpoint: Endpoint  # as the file has it (a host name and a port)
    where: str  # FILE:LINE of the Endpoint line
    since: float  # answers to lookups asked before this are old: dropped
    state: str = PENDING
    address: Optional[tuple[Any, ...]] = None  # the last address found
    resolved_at: Optional[float] = None
    next_try: Optional[float] = None  # None: no lookup wanted
    asking: bool = False  # a lookup is under way
    asked_at: Optional[float] = None  # ... asked then
    abandoned: int = 0  # lookups abandoned (no answer within LOOKUP_LIMIT)
    failures: int = 0  # lookups in a row that found nothing
    tries: int = 0  # lookups of a resolved name while the handshake fails (for the backoff)
    missing: int = 0  # of those, in a row, that said "no such name"
    reported: bool = False  # its one "failed" line is logged
    waited: bool = False  # its one "not found yet" line is logged
    # the handshake, as watch() sees it
    sent: int = 0  # initiations sent, at the last look
    done: int = 0  # handshakes completed, at the last look
    received: int = 0  # transport bytes received from the peer, at the last look
    done_at_start: int = 0  # handshakes completed when the name was configured
    unanswered_since: Optional[float] = None  # initiations went unanswered since then
    failing: bool = False


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What an answer means: an address to give the peer now (None: leave
    it), and a line to log (None: nothing to say)."""

    address: Optional[tuple[Any, ...]] = None
    message: Optional[str] = None
    level: int = logging.DEBUG


def _backoff(failures: int) -> float:
    return min(RETRY_CAP, RETRY_FIRST * 2.0 ** max(0, min(failures - 1, 16)))


class EndpointNames:
    """The named endpoints of an interface's peers, by public key.
    `patience`: seconds an initiation may go unanswered before the peer's
    handshake counts as failing (REKEY_TIMEOUT plus its jitter)."""

    def __init__(self, patience: float) -> None:
        self.patience = patience
        self.names: dict[bytes, Name] = {}

    def __len__(self) -> int:
        return len(self.names)

    def track(
        self,
        key: bytes,
        endpoint: Endpoint,
        where: str,
        asked_at: float,
        now: float,
        handshakes: tuple[int, int] = (0, 0),
        found: Optional[Found] = None,
    ) -> Optional[Outcome]:
        """Follow `endpoint` (a name) for the peer `key`, as the file has just
        been applied; its lookup was asked at `asked_at`: `found` is its
        answer, or None while it is under way.  `handshakes`: the peer's
        (initiations sent, handshakes completed) now.  The same name again
        keeps what is known of it (a name already reported failed is not
        reported again)."""
        old = self.names.get(key)
        if old is not None and (old.endpoint.host, old.endpoint.port) == (endpoint.host, endpoint.port):
            name = dataclasses.replace(old, endpoint=endpoint, where=where, since=asked_at)
        else:
            name = Name(endpoint, where, asked_at)
        name.sent, name.done = handshakes
        name.done_at_start = name.done
        name.unanswered_since, name.failing = None, False
        name.asking = found is None
        if found is None:
            name.next_try, name.asked_at = None, asked_at
        self.names[key] = name
        return None if found is None else self.answered(key, asked_at, now, found)

    def forget(self, key: bytes) -> None:
        """The peer is gone, or its endpoint was set otherwise (the UAPI):
        its name is no longer followed."""
        self.names.pop(key, None)

    def due(self, now: float) -> list[bytes]:
        """The peers whose lookup is due and not under way."""
        return [
            k for k, n in self.names.items() if not n.asking and n.next_try is not None and n.next_try <= now
        ]

    def asking(self, key: bytes, now: float) -> None:
        """A lookup of the peer's name is asked now."""
        name = self.names.get(key)
        if name is not None:
            name.asking, name.asked_at = True, now

    def overdue(self, now: float) -> list[bytes]:
        """The peers whose lookup under way has not answered within
        LOOKUP_LIMIT: to abandon."""
        return [
            k
            for k, n in self.names.items()
            if n.asking and n.asked_at is not None and now - n.asked_at >= LOOKUP_LIMIT
        ]

    def abandon(self, key: bytes, now: float) -> Optional[Outcome]:
        """The peer's lookup under way is given up on: a lookup that found
        nothing, and its answer, if it ever comes, is dropped (asked before
        now, it is an answer to an older question)."""
        name = self.names.get(key)
        if name is None or not name.asking:
            return None
        name.since = now
        return self.answered(key, now, now, NoAnswer())

    def next_deadline(self) -> Optional[float]:
        times = [n.next_try for n in self.names.values() if n.next_try is not None and not n.asking]
        return min(times) if times else None

    def is_failing(self, key: bytes) -> bool:
        name = self.names.get(key)
        return name is not None and name.failing

    # ------------------------------------------------------------ the handshake

    def watch(self, key: bytes, now: float, sent: int, done: int, received: int = 0) -> None:
        """The peer's initiations sent, handshakes completed and transport
        bytes received so far (read about once a second): whether its
        handshake is failing, and so whether a resolved name is looked up
        again.  A peer that is still heard from (its session carries data
        while a rekey's initiation goes unanswered) is not failing."""
        name = self.names.get(key)
        if name is None:
            return
        if done != name.done or received != name.received:
            name.unanswered_since = None
        elif sent != name.sent and name.unanswered_since is None:
            name.unanswered_since = now
        name.sent, name.done, name.received = sent, done, received
        failing = name.unanswered_since is not None and now - name.unanswered_since >= self.patience
        if failing and not name.failing and name.state == RESOLVED:
            name.failures = name.tries = 0
            if not name.asking:
                name.next_try = now  # look again at once
        if not failing and name.state == RESOLVED:
            name.next_try = None
        name.failing = failing

    # ------------------------------------------------------------ answers

    def answered(self, key: bytes, asked_at: float, now: float, found: Found) -> Optional[Outcome]:
        """A lookup asked at `asked_at` answered `found`.  None if it is of no
        use any more (the peer, or its name, changed since it was asked)."""
        name = self.names.get(key)
        if name is None or asked_at < name.since:
            return None
        name.asking = False
        name.since = asked_at
        if isinstance(found, NoAnswer):
            return self._abandoned(key, name, now, found)
        if isinstance(found, OSError):
            return self._not_found(key, name, now, found)
        return self._found(name, now, _with_port(found, name.endpoint.port))

    def _found(self, name: Name, now: float, address: tuple[Any, ...]) -> Outcome:
        first, previous = name.address is None, name.address
        before, name.address, name.resolved_at = name.state, address, now
        name.state, name.failures, name.missing = RESOLVED, 0, 0
        name.tries += 1
        name.next_try = now + _backoff(name.tries) if name.failing else None
        proven = name.done != name.done_at_start  # a handshake since the name was configured
        where = format_endpoint(address)
        if first or before != RESOLVED:
            message = f"{name.where}: [Peer] Endpoint: {name.endpoint} resolved to {where}"
            level = logging.INFO if (name.waited or name.reported) else logging.DEBUG
            if proven and not name.failing:
                return Outcome(None, message + " (the peer's handshake works where it is: kept)", level)
            return Outcome(address, message, level)
        if name.failing:  # (the daemon leaves a peer that is there already where it is)
            moved = f"{name.where}: [Peer] Endpoint: {name.endpoint} moved to {where}"
            return Outcome(address, moved if address != previous else None, logging.INFO)
        return Outcome(None)

    def _not_found(self, key: bytes, name: Name, now: float, error: OSError) -> Outcome:
        name.failures += 1
        name.missing = name.missing + 1 if says_missing(error) else 0
        why = error.strerror or str(error)
        head = f"{name.where}: [Peer] Endpoint: {why}"
        if name.state == RESOLVED:  # a look again while failing: the address found stays
            name.tries += 1
            name.next_try = now + _backoff(name.tries) if name.failing else None
            return Outcome(None, f"{head} (peer {fingerprint(key)} keeps {format_endpoint(name.address)})")
        if name.missing >= MISSING_LIMIT:
            name.state, name.next_try = FAILED, now + FAILED_RETRY
            if not name.reported:
                name.reported = True
                return Outcome(
                    None,
                    f"{head}: no such name after {name.missing} lookups; peer {fingerprint(key)} "
                    f"waits for it (looked up every {FAILED_RETRY:g} s)",
                    logging.ERROR,
                )
            return Outcome(None, head)
        name.next_try = now + _backoff(name.failures)
        if name.missing or name.waited or name.reported:
            return Outcome(None, head)  # a missing name has its line once it is failed
        name.waited = True
        return Outcome(
            None,
            f"{head}; peer {fingerprint(key)} has no endpoint until it resolves "
            f"(looked up again in the background)",
            logging.WARNING,
        )

    def _abandoned(self, key: bytes, name: Name, now: float, error: NoAnswer) -> Outcome:
        """A lookup that did not answer in time: a try that found nothing,
        with a line of its own (loud the first time: the count says whether
        the resolver keeps hanging)."""
        name.abandoned += 1
        self._not_found(key, name, now, error)
        name.waited = True  # (this line says what the "not found yet" one would)
        keeps = "has no endpoint until it resolves"
        if name.address is not None:
            keeps = f"keeps {format_endpoint(name.address)}"
        return Outcome(
            None,
            f"{name.where}: [Peer] Endpoint: {name.endpoint}: {error.strerror}: lookup abandoned "
            f"({name.abandoned} so far for this name); peer {fingerprint(key)} {keeps}",
            logging.WARNING if name.abandoned == 1 else logging.DEBUG,
        )

    # ------------------------------------------------------------ reports

    def rows(self) -> list[tuple[bytes, str, str, Optional[float], Optional[float]]]:
        """(public key, name as written, state, resolved at, next lookup)
        of every followed name, times on the caller's clock (None: never /
        none wanted)."""
        return [
            (k, n.endpoint.text or str(n.endpoint), n.state, n.resolved_at, None if n.asking else n.next_try)
            for k, n in self.names.items()
        ]


def _with_port(address: tuple[Any, ...], port: int) -> tuple[Any, ...]:
    """An address found for the name, with this peer's port (peers that
    share a name are looked up once)."""
    return (address[0], port, *address[2:])
