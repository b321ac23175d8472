"""WireGuard's timers: the constants, a TimerConfig that holds them, and the
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
import heapq
from dataclasses import dataclass

REKEY_AFTER_MESSAGES = 2 ** 60
REJECT_AFTER_MESSAGES = 2 ** 64 - 2 ** 13 - 1
REKEY_AFTER_TIME = 120.0
REJECT_AFTER_TIME = 180.0
REKEY_ATTEMPT_TIME = 90.0
REKEY_TIMEOUT = 5.0
REKEY_TIMEOUT_JITTER = 0.333
KEEPALIVE_TIMEOUT = 10.0
COOKIE_SECRET_MAX_AGE = 120.0
COOKIE_SECRET_LATENCY = 5.0
INITIATIONS_PER_SECOND = 50
MAX_STAGED_PACKETS = 128          # per peer, waiting for a handshake (wireguard-go)
HANDSHAKE_QUEUE_SIZE = 1024       # the session table's handshake queue (wireguard-go's)
UNDER_LOAD_AFTER_TIME = 1.0


@dataclass(frozen=True)
class TimerConfig:
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

    def __init__(self):
        self.due = [None] * 5
        self.queued = [None] * 5
        self.attempts = 0                   # handshake retries since the last non-retry initiation
        self.need_another_keepalive = False
        self.last_minute_sent = False       # the rekey-on-receive initiation went out
        self.gone = False                   # the peer was removed

    def pending(self, timer) -> bool:
        return self.due[timer] is not None


class TimerQueue:
    """Every peer's armed deadlines in one heap."""

    def __init__(self, delays):
        self._heap = []
        self._seq = 0
        self._delays = delays      # delays(peer, timer) -> seconds or None

    def __len__(self):
        return len(self._heap)

    def arm(self, peer, timer, when: float) -> None:
        pt = peer.timers
        pt.due[timer] = when
        q = pt.queued[timer]
        if q is None or when < q:
            pt.queued[timer] = when
            self._seq += 1
            heapq.heappush(self._heap, (when, self._seq, peer, timer))

    @staticmethod
    def disarm(peer, timer) -> None:
        peer.timers.due[timer] = None

    def event(self, peer, name: str, now: float) -> None:
        """Apply protocol event `name` to the peer's timers."""
        pt = peer.timers
        for timer, action in TRANSITIONS[name]:
            if action == STOP:
                pt.due[timer] = None
            elif action == START or action == ANOTHER:
                if pt.due[timer] is None:
                    self.arm(peer, timer, now + self._delays(peer, timer))
                elif action == ANOTHER:
                    pt.need_another_keepalive = True
            else:
                delay = self._delays(peer, timer)
                if delay is not None:
                    self.arm(peer, timer, now + delay)

    def _settle(self) -> tuple | None:
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

    def pop_due(self, now: float):
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
