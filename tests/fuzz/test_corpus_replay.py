"""Every saved input in tests/fuzz/corpus/<target>/ (seeds and any crash-*
found by a fuzzer) is run through its Python target in-process, every run.
(The C targets' corpora are replayed by test_fuzz_native.py.)"""

import os

import pytest

from tests.fuzz.conftest import CORPUS
from tests.fuzz.targets import TARGETS


def _inputs():
    out = []
    for target in sorted(TARGETS):
        d = os.path.join(CORPUS, target)
        for name in sorted(os.listdir(d)):
            out.append(pytest.param(target, name, id=f"{target}/{name}"))
    return out


@pytest.mark.parametrize("target,name", _inputs())
def test_replay(target, name):
    with open(os.path.join(CORPUS, target, name), "rb") as f:
        TARGETS[target](f.read())


@pytest.mark.parametrize("target", sorted(TARGETS) + ["aead", "wg_open"])
def test_corpus_has_seeds(target):
    d = os.path.join(CORPUS, target)
    seeds = [f for f in os.listdir(d) if f.startswith("seed-")]
    assert len(seeds) >= 5, f"{d}: run python3 -m tests.fuzz.make_corpus"


def test_seeds_reach_deep_paths():
    """The datagram seeds are valid in the World: the saved initiation is
    answered, the saved response completes a handshake, the saved cookie reply
    is accepted and the saved data messages are delivered."""
    from tests.fuzz import targets as T

    made = []
    orig = T.World.__init__

    def init(self, *a, **k):
        orig(self, *a, **k)
        made.append(self)

    def run(name):
        made.clear()
        with open(os.path.join(CORPUS, "datagram", "seed-" + name), "rb") as f:
            T.datagram_target(f.read())
        return made[0]

    T.World.__init__ = init
    try:
        w = run("init")
        pb = w.b.peers[w.a.public_key]
        assert (
            w.b.counters.handshakes_completed == 1 and pb.stats(w.b.table.clock(w.clock.now)).next is not None
        )
        w = run("resp")
        assert w.a.counters.handshakes_completed == 2
        w = run("cookie")
        assert w.a.peers[w.b.public_key].cookie.cookie is not None
        w = run("data-a")
        assert sum(w.delivered["B"].values()) == 1 + len(T.SEED_PACKETS["A"])
        w = run("data-b")
        assert sum(w.delivered["A"].values()) == 1 + len(T.SEED_PACKETS["B"])
        w = run("under-load-relay")
        assert w.b.drops()["cookie_sent"] >= 1 and w.b.counters.handshakes_completed >= 2
    finally:
        T.World.__init__ = orig
