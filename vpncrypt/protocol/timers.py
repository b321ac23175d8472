"""WireGuard's timers: the constants, a ProtocolConfig that holds them, and the
per-peer timer state machine as one table.

Five timers per peer (whitepaper section 6; the Linux module's timers.c):

    retransmit      resend an initiation that got no response
    keepalive       answer received data with a keepalive if we send nothing
    new_handshake   start a handshake when data we sent got no answer
    zero_keys       forget every key after 3 x REJECT_AFTER_TIME
    persistent      the configured persistent keepalive

Protocol events arm and disarm them as TRANSITIONS says; ``TimerQueue``
keeps every armed deadline in a heap, so the next deadline is found without
walking the peers.  Times are on the Device's (the session table's) clock.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vpncrypt.transport.model import TableConfig
from vpncrypt.wire import (
    COOKIE_SECRET_LATENCY,
    COOKIE_SECRET_MAX_AGE,
    HANDSHAKE_QUEUE_SIZE,
    INITIATIONS_PER_SECOND,
    KEEPALIVE_TIMEOUT,
    MAX_STAGED_PACKETS,
    REJECT_AFTER_MESSAGES,
    REJECT_AFTER_TIME,
    REKEY_AFTER_MESSAGES,
    REKEY_AFTER_TIME,
    REKEY_ATTEMPT_TIME,
    REKEY_TIMEOUT,
    REKEY_TIMEOUT_JITTER,
    UNDER_LOAD_AFTER_TIME,
)

if TYPE_CHECKING:
    from vpncrypt.protocol.peer import Peer


@dataclass(frozen=True)
class ProtocolConfig:
    rekey_after_messages: int = REKEY_AFTER_MESSAGES
    reject_after_messages: int = REJECT_AFTER_MESSAGES
    rekey_after_time: float = REKEY_AFTER_TIME
    reject_after_time: float = REJECT_AFTER_TIME
    rekey_attempt_time: float = REKEY_ATTEMPT_TIME
    rekey_timeout: float = REKEY_TIMEOUT
    rekey_timeout_jitter: float = REKEY_TIMEOUT_JITTER
    keepalive_timeout: float = KEEPALIVE_TIMEOUT
    cookie_secret_max_age: float = COOKIE_SECRET_MAX_AGE
    cookie_secret_latency: float = COOKIE_SECRET_LATENCY
    min_initiation_interval: float = 1.0 / INITIATIONS_PER_SECOND
    max_staged_packets: int = MAX_STAGED_PACKETS
    handshake_queue_size: int = HANDSHAKE_QUEUE_SIZE
    under_load_after_time: float = UNDER_LOAD_AFTER_TIME

    @property
    def max_timer_handshakes(self) -> int:
        """Retries before giving up: 90 s / 5 s = 18, so 20 initiations in all
        (the first, 18 retries, and the one whose timer finds the count past 18)."""
        return int(self.rekey_attempt_time // self.rekey_timeout)

    @property
    def rekey_on_receive_age(self) -> float:
        return self.reject_after_time - self.keepalive_timeout - self.rekey_timeout

    @property
    def under_load_queue_depth(self) -> int:
        """Handshake messages waiting at once that put the device under load
        (wireguard-go: an eighth of its handshake queue)."""
        return self.handshake_queue_size // 8

    def table_config(self, mtu: int, ratelimit_rate: float = 20.0, ratelimit_burst: int = 5) -> TableConfig:
        """The session table's configuration for these limits: the interface
        MTU (the padding cap) and the per-source rate limit under load
        (wireguard-go: 20 a second, bursts of 5) are the interface's."""
        return TableConfig(
            reject_after_time=self.reject_after_time,
            rekey_after_time=self.rekey_after_time,
            rekey_on_receive_age=self.rekey_on_receive_age,
            reject_after_messages=self.reject_after_messages,
            rekey_after_messages=self.rekey_after_messages,
            mtu=mtu,
            handshake_queue=self.handshake_queue_size,
            under_load_depth=self.under_load_queue_depth,
            under_load_hold=self.under_load_after_time,
            cookie_secret_age=self.cookie_secret_max_age,
            ratelimit_rate=ratelimit_rate,
            ratelimit_burst=ratelimit_burst,
        )


RETRANSMIT, KEEPALIVE, NEW_HANDSHAKE, ZERO_KEYS, PERSISTENT = range(5)
TIMER_NAMES = ("retransmit", "keepalive", "new_handshake", "zero_keys", "persistent")

# What each protocol event does to a peer's timers (WireGuard's timers.c):
#   SET       arm at now + delay, replacing a pending deadline
#   START     arm at now + delay unless already pending
#   STOP      disarm
#   ANOTHER   START, or if already pending remember to send another keepalive
#   SET_IF    SET when the delay is not None (persistent keepalive configured)
SET, START, STOP, ANOTHER, SET_IF = "set", "start", "stop", "another", "set_if"

TRANSITIONS = {
    "data_sent": ((NEW_HANDSHAKE, START),),
    "data_received": ((KEEPALIVE, ANOTHER),),
    "authenticated_sent": ((KEEPALIVE, STOP),),
    "authenticated_received": ((NEW_HANDSHAKE, STOP),),
    "traversal": ((PERSISTENT, SET_IF),),
    "handshake_initiated": ((RETRANSMIT, SET),),
    "handshake_complete": ((RETRANSMIT, STOP),),
    "session_derived": ((ZERO_KEYS, SET),),
}


class PeerTimers:
    """One peer's deadlines (None: not armed).  ``queued[t]`` is the time of
    the timer's earliest entry in the heap: an entry is only pushed when a
    deadline moves earlier; one that moved later is pushed again when its
    old entry comes up."""

    __slots__ = ("due", "queued", "attempts", "need_another_keepalive", "last_minute_sent", "gone")

    def __init__(self) -> None:
        self.due: list[float | None] = [None] * 5
        self.queued: list[float | None] = [None] * 5
        self.attempts = 0  # handshake retries since the last non-retry initiation
        self.need_another_keepalive = False
        self.last_minute_sent = False  # the rekey-on-receive initiation went out
        self.gone = False  # the peer was removed

    def pending(self, timer: int) -> bool:
        return self.due[timer] is not None


_Entry = tuple[float, int, "Peer", int]  # (when, sequence, peer, timer)


class TimerQueue:
    """Every peer's armed deadlines in one heap."""

    def __init__(self, delays: Callable[[Peer, int], float | None]) -> None:
        self._heap: list[_Entry] = []
        self._seq = 0
        self._delays = delays  # delays(peer, timer) -> seconds or None

    def __len__(self) -> int:
        return len(self._heap)

    def arm(self, peer: Peer, timer: int, when: float) -> None:
        pt = peer.timers
        pt.due[timer] = when
        q = pt.queued[timer]
        if q is None or when < q:
            pt.queued[timer] = when
            self._seq += 1
            heapq.heappush(self._heap, (when, self._seq, peer, timer))

    @staticmethod
    def disarm(peer: Peer, timer: int) -> None:
        peer.timers.due[timer] = None

    def event(self, peer: Peer, name: str, now: float) -> None:
        """Apply protocol event `name` to the peer's timers."""
        pt = peer.timers
        for timer, action in TRANSITIONS[name]:
            if action == STOP:
                pt.due[timer] = None
            elif action == START or action == ANOTHER:
                if pt.due[timer] is None:
                    delay = self._delays(peer, timer)
                    assert delay is not None  # only the persistent keepalive has none
                    self.arm(peer, timer, now + delay)
                elif action == ANOTHER:
                    pt.need_another_keepalive = True
            else:
                delay = self._delays(peer, timer)
                if delay is not None:
                    self.arm(peer, timer, now + delay)

    def _settle(self) -> _Entry | None:
        """The heap's first entry that stands for a live deadline (dropping
        stale entries and moving postponed ones), or None."""
        heap = self._heap
        while heap:
            when, _, peer, timer = heap[0]
            pt = peer.timers
            if pt.gone or pt.queued[timer] != when:
                heapq.heappop(heap)
                continue
            due = pt.due[timer]
            if due is None:
                heapq.heappop(heap)
                pt.queued[timer] = None
                continue
            if due > when:
                heapq.heappop(heap)
                pt.queued[timer] = None
                self.arm(peer, timer, due)
                continue
            return heap[0]
        return None

    def next_deadline(self) -> float | None:
        top = self._settle()
        return None if top is None else top[0]

    def pop_due(self, now: float) -> tuple[Peer, int] | None:
        """The next (peer, timer) due at `now`, disarmed, or None."""
        top = self._settle()
        if top is None or top[0] > now:
            return None
        heapq.heappop(self._heap)
        _, _, peer, timer = top
        peer.timers.queued[timer] = None
        peer.timers.due[timer] = None
        return peer, timer

    def compact(self) -> None:
        """Drop every stale entry (after many peers were removed)."""
        self._heap = [e for e in self._heap if not e[2].timers.gone and e[2].timers.queued[e[3]] == e[0]]
        heapq.heapify(self._heap)
