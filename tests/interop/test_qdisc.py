"""vpncrypt.bench.qdisc: the root qdisc set through rtnetlink, checked
against what `tc` reports and against what `tc` itself can set on the same
kernel (a kernel without fq_codel refuses both the same way)."""

import errno
import sys

import pytest

from vpncrypt.bench import qdisc


def _in_ns(lab, side, code):
    """Run `code` (with qdisc imported) in a namespace; its stdout."""
    r = lab.run_in(side, sys.executable, "-c", "from vpncrypt.bench import qdisc\n" + code, check=False)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def _tc_kind(lab, side, dev):
    out = lab.run_in(side, "tc", "qdisc", "show", "dev", dev, "root").stdout.split()
    return out[1] if len(out) > 1 else None


def test_root_qdisc_set_and_read_back_as_tc_sees_it(lab):
    dev = lab.veth["A"]
    assert _in_ns(lab, "A", f"print(qdisc.root_qdisc({dev!r}))") == _tc_kind(lab, "A", dev)
    for kind in ("bfifo", "pfifo"):
        got = _in_ns(lab, "A", f"qdisc.set_root_qdisc({dev!r}, {kind!r}); print(qdisc.root_qdisc({dev!r}))")
        assert got == kind
        assert _tc_kind(lab, "A", dev) == kind
    # the other side's veth is untouched
    assert _tc_kind(lab, "B", lab.veth["B"]) not in ("bfifo", "pfifo")


def test_fq_codel_where_tc_can_set_it_else_the_same_refusal(lab):
    dev = lab.veth["A"]
    tc = lab.run_in("B", "tc", "qdisc", "replace", "dev", lab.veth["B"], "root", "fq_codel", check=False)
    before = _tc_kind(lab, "A", dev)
    got = _in_ns(
        lab,
        "A",
        f"""
try:
    qdisc.set_fq_codel({dev!r})
    print("ok", qdisc.root_qdisc({dev!r}))
except OSError as e:
    print("error", e.errno, e)
""",
    )
    if tc.returncode == 0:  # the kernel has fq_codel
        assert got == "ok fq_codel"
        assert _tc_kind(lab, "A", dev) == "fq_codel"
    else:  # "Specified qdisc kind is unknown": ENOENT, nothing changed
        assert got.startswith(f"error {errno.ENOENT} ") and dev in got and "fq_codel" in got, got
        assert _tc_kind(lab, "A", dev) == before


def test_missing_interface_and_no_privilege_are_clear_errors(lab):
    got = _in_ns(
        lab,
        "A",
        """
try:
    qdisc.set_fq_codel("nosuchdev0")
except OSError as e:
    print(e.errno, e)
""",
    )
    assert got.startswith(f"{errno.ENODEV} ") and "nosuchdev0" in got, got
    # without CAP_NET_ADMIN the kernel says EPERM, and the qdisc stays.  Still uid 0 (an
    # empty bounding set leaves root no capabilities after exec): another uid could not read a
    # checkout under /root, where CI clones, and would fail on the import instead
    dev = lab.veth["A"]
    before = _tc_kind(lab, "A", dev)
    r = lab.run_in(
        "A",
        "setpriv",
        "--inh-caps=-all",
        "--bounding-set=-all",
        sys.executable,
        "-c",
        f"""
from vpncrypt.bench import qdisc
try:
    qdisc.set_root_qdisc({dev!r}, "pfifo")
except OSError as e:
    print(e.errno)
""",
        check=False,
    )
    assert r.stdout.strip() == str(errno.EPERM), (r.stdout, r.stderr)
    assert _tc_kind(lab, "A", dev) == before


def test_not_an_interface_name():
    with pytest.raises(OSError) as e:
        qdisc.set_fq_codel("no/such")
    assert e.value.errno == errno.ENODEV
