"""Run by tests/dataplane/test_pmtu_router.py inside namespace A (`ip netns
exec A python3 THIS B4 B6`): A's side of a path A - R - B whose R-B link has
an MTU of 1280, with a session table whose one peer is B (its endpoint B4 or
B6, port 9; B has no daemon: only R's ICMP matters here).  For each family:
a message of 1460 (IPv4) / 1480 (IPv6) bytes is sealed and sent; R cannot
forward it (DF; IPv6 is never fragmented on the way) and answers "fragmentation needed" /
"packet too big", MTU 1280; the next receive round (the socket's error, then
its error queue) gives it to the table, which then refuses an inner packet
that does not fit and takes one that does.  Then B forges errors (its own
raw socket, spoofing R): one quoting a receiver index that is not the
peer's, and one for another port: both refused.  Prints lines "RESULT ..."
and "ok"."""

import os
import socket
import sys
import time

sys.path.insert(0, os.getcwd())

from vpncrypt.dataplane.io import TunBatch, UdpBatchSocket  # noqa: E402
from vpncrypt.transport import new_table  # noqa: E402
from vpncrypt.transport import status as S  # noqa: E402

from tests.transport.helpers import KEY_AB, KEY_BA, install, ipv4, ipv6  # noqa: E402

REMOTE_INDEX = 7


def side(family, peer):
    t = new_table("native")
    pid = t.add_peer()
    t.route_add(pid, "10.0.0.1/32")
    t.route_add(pid, "fd00::1/128")
    t.set_endpoint(pid, (peer, 9))
    install(t, pid, 5, REMOTE_INDEX, KEY_AB, KEY_BA, True)
    s = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.bind(("::", 0))
    udp = UdpBatchSocket(s, batch=16)
    near, far = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    inner = TunBatch(near.fileno(), mtu=1500, batch=16)
    return t, pid, udp, inner, s


def seal(t, udp, pid, packets, now):
    b = t.batch(16, 2048)
    b.seal_send_packets(packets, udp, now, pid)
    return [b.status[i] for i in range(len(packets))], b.io.sent


def wait_learned(t, pid, udp, inner, now):
    b = t.batch(16, 2048)
    for _ in range(400):  # R's error comes at once; allow for a loaded machine
        b.receive(udp, inner, now)
        if t.stats(pid, now).path_mtu:
            return t.stats(pid, now)
        time.sleep(0.01)
    raise AssertionError("no path MTU learned")


def main():
    b4, b6 = sys.argv[1], sys.argv[2]
    assert b4 and b6
    for peer, mk, src, dst, fits in (
        (b4, ipv4, "10.0.0.2", "10.0.0.1", 1216),
        (b6, ipv6, "fd00::2", "fd00::1", 1200),
    ):
        t, pid, udp, inner, s = side(4 if "." in peer else 6, peer)
        assert udp.pmtu
        hdr = 20 if mk is ipv4 else 40
        status, sent = seal(t, udp, pid, [mk(src, dst, bytes(1400 - hdr))], 1.0)
        assert status == [S.OK] and sent == 1, (status, sent)
        st = wait_learned(t, pid, udp, inner, 1.0)
        print("RESULT", peer, st.path_mtu, st.inner_mtu, t.pmtu_counts, flush=True)
        # sealed only (nothing sent: what reached B would bring its port unreachable)
        # (an IPv6 inner packet of up to 1280 bytes always goes: the largest that fits is 1280)
        top = fits if mk is ipv4 else 1280
        res = t.seal([mk(src, dst, bytes(top - hdr)), mk(src, dst, bytes(top + 1 - hdr))], 2.0, peer=pid)
        assert res.status == [S.OK, S.PATH_MTU], res.status
        print("PORT", peer, s.getsockname()[1], flush=True)
        # B forges two errors now (it waits for this line), then says so on stdin
        assert sys.stdin.readline().strip() == "forged"
        b = t.batch(16, 2048)
        for _ in range(400):
            b.receive(udp, inner, 3.0)
            if t.pmtu_counts[1] >= 2:
                break
            time.sleep(0.01)
        print("FORGED", peer, t.stats(pid, 3.0).path_mtu, t.pmtu_counts, flush=True)
        s.close()
    print("ok", flush=True)


if __name__ == "__main__":
    main()
