"""Known answers from RFC 8439 (section 2 and appendix A), draft-irtf-cfrg-xchacha
(section 2.2.1) and draft-strombergson-chacha-test-vectors (reduced rounds), kept
as data in tests/vectors/chacha_known_answers.json (its sources and licence:
tests/vectors/README.md).

``load()`` returns that file's groups, each a list of vectors: dicts whose byte
strings (hex in the file) are bytes, with the ``source`` and ``note`` texts and
the integer fields (counter, rounds) as they stand."""

import json
import pathlib

FILE = pathlib.Path(__file__).resolve().parent.parent / "vectors" / "chacha_known_answers.json"
TEXT = ("source", "note")


def _vector(entry: dict) -> dict:
    return {k: bytes.fromhex(v) if isinstance(v, str) and k not in TEXT else v for k, v in entry.items()}


def load(path: pathlib.Path = FILE) -> dict[str, list[dict]]:
    groups = json.loads(path.read_text())
    return {name: [_vector(e) for e in entries] for name, entries in groups.items() if name != "about"}
