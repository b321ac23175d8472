"""A real TUN with offloads, in a throwaway network namespace (root only):
kernel TCP streams and UDP_SEGMENT datagrams leave through the TUN, are read
(as GSO super-packets when offloads are on), split, reflected, coalesced and
written back, and every byte arrives intact (tun_offload_child.py checks the
bytes; this checks that the offload paths were really taken)."""

import os

import pytest

from tests.dataplane.netns_child import needs_root_and_tun, run_child  # noqa: F401 (autouse)


def kernel_at_least(major, minor):
    release = os.uname().release.split("-")[0].split(".")
    return (int(release[0]), int(release[1])) >= (major, minor)


@pytest.mark.parametrize("family,mss", [(4, 1199), (6, 1199), (6, 536)])
def test_offloads_on_every_byte_through_superpackets(family, mss):
    st = run_child("vcoff", "tun_offload_child.py", family, "on", mss)
    assert {"csum", "tso"} <= set(st["offloads"])
    tcp = st["tcp_rx"]
    # TCP came as super-packets: far fewer reads than packets
    assert tcp["superpackets"] > 0 and tcp["segments"] > 2 * tcp["superpackets"]
    assert tcp["reads"] < tcp["segments"] / 4
    assert st["rx"]["dropped"] == 0 and st["rx"]["too_big"] == 0
    # and went back coalesced
    assert st["tx"]["coalesced"] > st["tx"]["packets"] / 2
    assert st["tx"]["bad_csum"] == 0 and st["tx"]["write_errors"] == 0
    if kernel_at_least(6, 2):
        # USO: every UDP_SEGMENT burst came as one super-datagram
        assert "uso" in st["offloads"]
        assert st["rx"]["superpackets"] - tcp["superpackets"] >= 40
    if mss == 1199:  # an odd MSS (timestamps take 12 bytes off the one asked for)
        assert st["client_mss"] == 1187


@pytest.mark.parametrize("family", [4, 6])
def test_offloads_on_with_the_daemons_65535_byte_slots(family):
    """TunBatch as the daemon makes it (mtu 65535): super-packets split from
    the part of the read that overflows the slot, and single packets longer
    than that part (UDP datagrams of 2.5-6 KB on a 9000-byte link MTU) whole."""
    st = run_child("vcoff", "tun_offload_child.py", family, "on", 1199, 65535)
    tcp = st["tcp_rx"]
    assert tcp["superpackets"] > 0 and tcp["segments"] > 2 * tcp["superpackets"]
    assert st["rx"]["dropped"] == 0 and st["rx"]["too_big"] == 0
    assert st["big_datagrams"] == 24
    assert st["tx"]["bad_csum"] == 0 and st["tx"]["write_errors"] == 0


@pytest.mark.parametrize("family", [4, 6])
def test_offloads_forced_off_every_byte_one_packet_per_read(family):
    st = run_child("vcoff", "tun_offload_child.py", family, "off", 1199)
    assert st["offloads"] == []
    assert st["rx"]["superpackets"] == 0 and st["rx"]["csum_completed"] == 0
    assert st["tx"]["coalesced"] == 0 and st["tx"]["writes"] == st["tx"]["packets"]
    assert st["rx"]["reads"] >= st["reflected"]


def test_tso_switched_off_like_ethtool_gives_no_tcp_superpackets():
    """How to force a TUN reader's TCP offload off from outside (wireguard-go
    has no option for it): `ethtool -K IFACE tso off`, here its ioctl."""
    st = run_child("vcoff", "tun_offload_child.py", 4, "tso-off", 1199)
    assert "tso" in st["offloads"]
    assert st["tcp_rx"]["superpackets"] == 0
    assert st["tcp_rx"]["reads"] > 3000  # 4 MiB of TCP one packet per read
    assert st["tx"]["coalesced"] > 0  # writing super-packets is not affected


def test_plain_tun_without_vnet_header_still_works():
    st = run_child("vcoff", "tun_offload_child.py", 4, "plain", 1460)
    assert st["offloads"] == [] and st["rx"] == {} and st["reflected"] > 3000
