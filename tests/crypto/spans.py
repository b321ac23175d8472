"""The message lengths where the AEAD kernels change how they work, for the
tests that walk them (test_guard_pages.py, test_tampering.py).

Opening applies the first stretch of keystream in a stack scratch together
with the one-time key, the rest only after the tag matched: 64 bytes on
generic, 192 on neon4, 256 on neon, 448 on avx2, and up to 960 on avx512,
which opens its short pass first (none from 961 to 1024 bytes, 64 from 1025
to 1088, 448 at 1472); 1024 is avx512's whole 16-block pass."""


def around(*points: int) -> list[int]:
    """Each point and its two neighbours, sorted."""
    return sorted({q for p in points for q in (p - 1, p, p + 1)})


# the scratch spans and the 16-block pass, and where a pass or a block boundary meets them
OPEN_SPANS = sorted(around(192, 256, 448, 960, 1024, 1472, 1984, 2048) + [1088, 1089, 3008, 3009, 4097])
# from empty and one Poly1305 block on, for the tag checks
BOUNDARIES = sorted([0, 1] + around(16, 64, 128, 192, 256, 448, 960, 1024, 1984) + [1088, 1089, 1472, 4097])
