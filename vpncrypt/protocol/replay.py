"""Anti-replay sliding window (RFC 6479 style ring of 64-bit words).

128 words = 8192 bits; the window is 8192 - 64 = 8128 counters, as in the
Linux kernel and wireguard-go.  ``check`` only looks; ``update`` marks a
counter (call it only after the packet authenticated).
"""

WORD_BITS = 64
WORDS = 128
RING_BITS = WORD_BITS * WORDS
WINDOW = RING_BITS - WORD_BITS  # 8128
_WMASK = WORDS - 1


class ReplayWindow:
    __slots__ = ("greatest", "words")

    def __init__(self):
        self.greatest = -1
        self.words = [0] * WORDS

    def check(self, counter: int) -> bool:
        """Would `counter` be accepted (without recording it)?"""
        g = self.greatest
        if counter > g:
            return True
        if g - counter >= WINDOW:
            return False
        return not (self.words[(counter >> 6) & _WMASK] >> (counter & 63)) & 1

    def update(self, counter: int) -> bool:
        """Record `counter`; False if it is a duplicate or too old."""
        g = self.greatest
        words = self.words
        if counter > g:
            cur = g >> 6
            diff = (counter >> 6) - cur
            if diff > WORDS:
                diff = WORDS
            for i in range(1, diff + 1):
                words[(cur + i) & _WMASK] = 0
            self.greatest = counter
        elif g - counter >= WINDOW:
            return False
        idx = (counter >> 6) & _WMASK
        bit = 1 << (counter & 63)
        w = words[idx]
        if w & bit:
            return False
        words[idx] = w | bit
        return True

    def __repr__(self):
        return f"<ReplayWindow greatest={self.greatest}>"
