"""WireGuard protocol timing constants and the TimerConfig that holds them.

Tests may pass a TimerConfig with shorter times to Device.
"""
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
MAX_QUEUED_PACKETS = 1024


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
    max_queued_packets: int = MAX_QUEUED_PACKETS

    @property
    def max_handshake_attempts(self) -> int:
        return int(self.rekey_attempt_time // self.rekey_timeout)

    @property
    def rekey_on_receive_age(self) -> float:
        return self.reject_after_time - self.keepalive_timeout - self.rekey_timeout
