"""The example configs (config/*.example) with their <NAME_PRIVATE_KEY>,
<NAME_PUBLIC_KEY> and <NAME_PRESHARED_KEY> placeholders filled with keys
made at run time, consistently: NAME's public key is that of NAME's private
key, in every file filled from the same KeyRing."""

import os
import re

from vpncrypt.protocol import keys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLACEHOLDER = re.compile(r"<([A-Z]+)_(PRIVATE|PUBLIC|PRESHARED)_KEY>")


class KeyRing:
    """Keys by name, made from `rng` when first asked for (a fixed rng: the
    same keys every run, for the fuzz seeds)."""

    def __init__(self, rng=os.urandom) -> None:
        self.rng = rng
        self.private: dict = {}
        self.preshared: dict = {}

    def key(self, name: str, kind: str) -> str:
        book = self.preshared if kind == "PRESHARED" else self.private
        if name not in book:
            book[name] = keys.genpsk(self.rng) if kind == "PRESHARED" else keys.genkey(self.rng)
        private = book[name]
        if kind == "PRESHARED":
            return private
        return private if kind == "PRIVATE" else keys.pubkey(private)


def example_text(name: str) -> str:
    with open(os.path.join(REPO, "config", name)) as f:
        return f.read()


def filled_example(name: str, ring: "KeyRing | None" = None) -> str:
    """config/`name` with every placeholder replaced from `ring`."""
    ring = ring if ring is not None else KeyRing()
    return PLACEHOLDER.sub(lambda m: ring.key(m.group(1), m.group(2)), example_text(name))
