"""A handshake flooder for the reliability tests (runs inside a test namespace):

    python3 -m tests.reliability.flood '{"target": ["192.168.241.2", 51820],
        "public_key": "<victim public key, base64>", "source": "192.168.241.3",
        "sockets": 512, "rate": 50000, "seconds": 8}'

It sends WireGuard handshake initiations round-robin from `sockets` UDP
sockets (as many source ports; bound round-robin to the addresses of
"sources" where it is given) at up to `rate` per second:

* "valid": a real initiation (built with vpncrypt.protocol code) from a random
  static key the victim does not know, with a correct mac1, so it passes the
  cheap check and would cost the victim a Diffie-Hellman if it were not under
  load.  Half of these sockets ("cookie") take the cookie the victim replies
  with and from then on send with a correct mac2 too: they reach the
  victim's per-source rate limiter.
* "nomac": the same bytes with a wrong mac1 (dropped at the first check).

It counts what comes back per kind: cookie replies (type 3), responses (type
2).  Prints one JSON line with the figures.
"""

import json
import os
import select
import socket
import sys
import time

KINDS = ("cookie", "valid", "nomac", "nomac")  # socket i has kind KINDS[i % 4]


def build_bodies(victim_pub: bytes, n: int):
    """n initiation bodies (the 116 bytes before mac1) from unknown static keys."""
    from tests.benchlab.handshakeload import unknown_initiation_bodies
    from vpncrypt.crypto import get_backend

    crypto = get_backend("native")
    return unknown_initiation_bodies(victim_pub, n, crypto), crypto


def main(cfg):
    from vpncrypt.protocol import keys
    from vpncrypt.protocol.cookie import CookieState

    victim_pub = keys.decode(cfg["public_key"])
    target = (cfg["target"][0], int(cfg["target"][1]))
    nsocks, rate, seconds = int(cfg["sockets"]), float(cfg["rate"]), float(cfg["seconds"])
    bodies, crypto = build_bodies(victim_pub, min(64, nsocks))
    socks, kinds, msgs, states, by_fd = [], [], [], [], {}
    now = time.monotonic()
    for i in range(nsocks):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        sources = cfg.get("sources") or [cfg.get("source", "0.0.0.0")]
        s.bind((sources[i % len(sources)], 0))
        s.setblocking(False)
        kind = KINDS[i % 4]
        body = bodies[i % len(bodies)]
        st = CookieState(victim_pub)
        msg = st.add_macs(body, now)
        if kind == "nomac":
            msg = body + os.urandom(32)
        socks.append(s)
        kinds.append(kind)
        msgs.append(msg)
        states.append(st)
        by_fd[s.fileno()] = i
    ep = select.epoll()
    for s in socks:
        ep.register(s.fileno(), select.EPOLLIN)
    sent = dict.fromkeys(("cookie", "valid", "nomac", "mac2"), 0)
    got = {
        "cookie_replies_by_kind": dict.fromkeys(("cookie", "valid", "nomac"), 0),
        "responses": 0,
        "other": 0,
        "cookies_taken": 0,
        "bad_cookie_replies": 0,
    }
    timeline = []  # cookie replies received in each second
    send_errors = 0
    total = 0
    j = 0
    t0 = time.monotonic()
    end = t0 + seconds

    def drain(timeout):
        for fd, _ in ep.poll(timeout):
            i = by_fd[fd]
            s = socks[i]
            while True:
                try:
                    data = s.recv(2048)
                except BlockingIOError:
                    break
                t = time.monotonic()
                if data[:1] == b"\x03":
                    got["cookie_replies_by_kind"][kinds[i]] += 1
                    sec = int(t - t0)
                    while len(timeline) <= sec:
                        timeline.append(0)
                    timeline[sec] += 1
                    if kinds[i] == "cookie":
                        st = states[i]
                        if st.last_mac1 is not None and st.consume_reply(data, t, crypto):
                            got["cookies_taken"] += 1
                            msgs[i] = st.add_macs(bodies[i % len(bodies)], t)
                        elif st.last_mac1 is not None:
                            got["bad_cookie_replies"] += 1
                elif data[:1] == b"\x02":
                    got["responses"] += 1
                else:
                    got["other"] += 1

    while True:
        now = time.monotonic()
        if now >= end:
            break
        due = int(rate * (now - t0)) - total
        if due <= 0:
            drain(min(0.001, end - now))
            continue
        for _ in range(min(due, 256)):
            i = j % nsocks
            j += 1
            try:
                socks[i].sendto(msgs[i], target)
            except (BlockingIOError, OSError):
                send_errors += 1
                continue
            total += 1
            k = kinds[i]
            sent[k] += 1
            if k == "cookie" and states[i].cookie is not None:
                sent["mac2"] += 1
        drain(0)
    elapsed = time.monotonic() - t0
    stop = time.monotonic() + 0.5
    while time.monotonic() < stop:
        drain(0.05)
    replies = sum(got["cookie_replies_by_kind"].values())
    print(
        json.dumps(
            {
                "sent": total,
                "seconds": elapsed,
                "rate": total / elapsed if elapsed else 0.0,
                "wanted_rate": rate,
                "sockets": nsocks,
                "sent_by_kind": sent,
                "send_errors": send_errors,
                "cookie_replies": replies,
                "cookie_replies_per_s": replies / elapsed if elapsed else 0.0,
                "timeline": timeline,
                **got,
            }
        ),
        flush=True,
    )
    for s in socks:
        s.close()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
