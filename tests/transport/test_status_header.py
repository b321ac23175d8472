"""transport/status.py against native/vc_wg.h, the one source of the
session table's statuses, touch flags and sizes: every VC_WG_ status in the
header is a Status member of the same name and value and the other way
round, and so for the flags and sizes.  The header is read as text, not
through the built module, so a constant the cdef lost is caught too."""

import json
import pathlib
import re

from vpncrypt import wire
from vpncrypt.drop_reasons import DropReason
from vpncrypt.transport import status as S

HEADER = pathlib.Path(__file__).resolve().parents[2] / "native" / "vc_wg.h"


def defines(start: str, end: str) -> dict[str, int]:
    """The VC_WG_ integer #defines of vc_wg.h from the text `start` up to
    (not including) the text `end`."""
    text = HEADER.read_text()
    block = text[text.index(start) :]
    block = block[: block.index(end)]
    found = re.findall(r"^#define\s+VC_WG_(\w+)\s+(0x[0-9A-Fa-f]+|-?\d+)\b", block, re.M)
    assert found, f"no #defines between {start!r} and {end}"
    return {name: int(value, 0) for name, value in found}


def test_every_status_name_and_value():
    header = defines("per-datagram / per-packet status", "#define VC_WG_STATUS_COUNT")
    assert {m.name: m.value for m in S.Status} == header
    assert (
        S.STATUS_COUNT == defines("#define VC_WG_STATUS_COUNT", "#define VC_WG_EV_AUTH")["STATUS_COUNT"] == 20
    )
    for m in S.Status:  # the module-level names are the members
        assert getattr(S, m.name) is m


def test_touch_flags():
    header = defines("What a batch did to a peer", "#define VC_WG_HEADER")
    assert header == {name: getattr(S, name) for name in header}
    assert set(header) == {n for n in dir(S) if n.startswith("EV_") and n != "EV_ROUTINE"}
    assert {"EV_" + m.name: m.value for m in S.TouchFlag} == header
    # the data path's names are plain ints (an IntFlag operation is a Python call)
    assert all(type(getattr(S, name)) is int for name in header) and type(S.EV_ROUTINE) is int


def test_a_touch_reads_as_flag_names():
    from vpncrypt.transport.model import Touch

    touch = Touch(3, 0x001 | 0x002, 1, 148)
    assert S.TouchFlag(touch.flags) == S.TouchFlag.AUTH | S.TouchFlag.DATA
    assert "AUTH" in repr(touch) and "DATA" in repr(touch) and "SENT" not in repr(touch)


def test_sizes_match_the_header_and_wire():
    header = defines("#define VC_WG_HEADER", "typedef struct vc_wg_table")
    assert header == {"HEADER": 16, "OVERHEAD": 32, "WINDOW": 8128, "HANDSHAKE_MAX": 148, "COOKIE_REPLY": 64}
    assert (S.HEADER, S.OVERHEAD, S.WINDOW, S.HANDSHAKE_MAX, S.COOKIE_REPLY_LEN) == (16, 32, 8128, 148, 64)
    assert (
        wire.TRANSPORT_HEADER_LEN,
        wire.TRANSPORT_OVERHEAD,
        wire.HANDSHAKE_MAX,
        wire.COOKIE_REPLY_LEN,
    ) == (
        header["HEADER"],
        header["OVERHEAD"],
        header["HANDSHAKE_MAX"],
        header["COOKIE_REPLY"],
    )


def test_drop_names_one_per_dropping_status():
    """Every status but the four that are no drop (delivered, queued as a
    handshake, an authenticated keepalive, waiting for a key) maps to a
    DropReason, distinct ones, and the datagram on a stale keypair is not
    the protocol's flushed staged packets."""
    not_drops = {S.Status.OK, S.Status.HANDSHAKE, S.Status.KEEPALIVE, S.Status.NO_KEY}
    assert set(S.DROP_NAMES) == set(S.Status) - not_drops
    assert len(set(S.DROP_NAMES.values())) == len(S.DROP_NAMES)
    assert all(type(v) is DropReason for v in S.DROP_NAMES.values())
    assert S.DROP_NAMES[S.Status.STALE_KEYPAIR] == "stale_keypair"
    assert S.DROP_NAMES[S.Status.QUEUE_FULL] == "handshake_queue_full"  # not the staged packets' queue_full
    assert DropReason.STAGED_FLUSHED == "staged_flushed" != DropReason.STALE_KEYPAIR
    assert S.DROP_CODES == {v: k for k, v in S.DROP_NAMES.items()}


def test_a_drop_reason_prints_as_its_name():
    """A member is its counter name wherever it is printed or looked up: the
    names `vpncrypt show`, the UAPI and the metrics have always had."""
    r = DropReason.NO_ROUTE
    assert (str(r), f"{r}", "drop_" + r, json.dumps({r: 1})) == (
        "no_route",
        "no_route",
        "drop_no_route",
        '{"no_route": 1}',
    )
    assert {"no_route": 1}[r] == 1 and {r: 1}["no_route"] == 1
