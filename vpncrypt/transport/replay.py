"""The anti-replay window of wireguard-go and the Linux module (RFC 6479 style):
a ring of 128 64-bit words.  A counter more than 8128 behind the greatest
accepted one is too old; one exactly 8128 behind is still checked.

``fresh`` only looks (before decryption); ``record`` marks a counter (only
after the message authenticated) and is the final word.  Both refuse
counters at or past ``limit`` (REJECT_AFTER_MESSAGES)."""

_WORDS = 128
_MASK = _WORDS - 1
_WINDOW = (_WORDS - 1) * 64  # 8128


class ReplayWindow:
    __slots__ = ("greatest", "words", "received_any")

    def __init__(self) -> None:
        self.greatest = 0
        self.words = [0] * _WORDS
        self.received_any = False

    def fresh(self, counter: int, limit: int) -> bool:
        """Would `counter` be accepted (without recording it)?"""
        if counter >= limit:
            return False
        g = self.greatest
        if counter > g:
            return True
        if g - counter > _WINDOW:
            return False
        return not (self.words[(counter >> 6) & _MASK] >> (counter & 63)) & 1

    def record(self, counter: int, limit: int) -> bool:
        """Mark `counter`; False if it is too old, a duplicate or past `limit`."""
        if counter >= limit:
            return False
        self.received_any = True
        g = self.greatest
        words = self.words
        if counter > g:
            cur = g >> 6
            diff = min((counter >> 6) - cur, _WORDS)
            for i in range(1, diff + 1):
                words[(cur + i) & _MASK] = 0
            self.greatest = counter
        elif g - counter > _WINDOW:
            return False
        idx = (counter >> 6) & _MASK
        bit = 1 << (counter & 63)
        if words[idx] & bit:
            return False
        words[idx] |= bit
        return True

    def __repr__(self) -> str:
        return f"<ReplayWindow greatest={self.greatest}>"
