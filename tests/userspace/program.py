"""A program using vpncrypt.userspace, run by the tests as nobody with no
capability (its lines on stdout are JSON):

    program.py traffic CONF OUTDIR   TCP, UDP, getaddrinfo and the errors, in one tunnel
    program.py server CONF           a server inside the tunnel: prints its port, echoes
                                     one connection's bytes reversed, ends at a line on stdin
    program.py hold CONF             prints the tunnel's process id, then on a line
                                     "close" on stdin closes it and prints "closed";
                                     on "use" tries a connection, prints its error, closes;
                                     on "exit" leaves without closing it
    program.py object CONF           the tunnel from a Config object (a getaddrinfo)
    program.py refused CONF          open_tunnel's error for a config it refuses
"""

import asyncio
import json
import os
import socket
import sys

import vpncrypt.userspace
from vpncrypt.config.parser import load_config

PEER_V4, PEER_V6, PEER_NAME = "10.77.0.1", "fd77::1", "peer.test"


def say(**fields):
    print(json.dumps(fields), flush=True)


async def fetch(tun, host, out):
    """GET /blob from the peer's HTTP server into `out`."""
    reader, writer = await tun.open_connection(host, 8000)
    writer.write(f"GET /blob HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    body = await reader.read()
    writer.close()
    await writer.wait_closed()
    with open(out, "wb") as f:
        f.write(body)
    return head.split(b"\r\n", 1)[0].decode()


class Echoes(asyncio.DatagramProtocol):
    def __init__(self):
        self.got = asyncio.get_running_loop().create_future()

    def datagram_received(self, data, addr):
        if not self.got.done():
            self.got.set_result((data, addr))


async def udp(tun, **where):
    payload = os.urandom(1200)
    transport, proto = await tun.create_datagram_endpoint(Echoes, **where)
    try:
        target = where.get("remote_addr")
        for _ in range(20):  # UDP: a datagram lost before the handshake is sent again
            if target is None:
                transport.sendto(payload, (PEER_V4, 7))
            else:
                transport.sendto(payload)
            try:
                data, addr = await asyncio.wait_for(asyncio.shield(proto.got), 1.0)
                return {"same": data == payload, "from": list(addr[:2])}
            except asyncio.TimeoutError:
                continue
        return {"same": False, "from": None}
    finally:
        transport.close()


async def error_of(coro):
    try:
        await coro
    except OSError as e:
        return {"type": type(e).__name__, "errno": e.errno, "text": str(e)}
    return None


async def traffic(conf, outdir):
    async with await vpncrypt.userspace.open_tunnel(conf) as tun:
        result = {"name": tun.name}
        for key, host in (("v4", PEER_V4), ("v6", PEER_V6), ("name", PEER_NAME)):
            result[key] = await fetch(tun, host, os.path.join(outdir, key))
        result["udp4"] = await udp(tun, remote_addr=(PEER_V4, 7))
        result["udp6"] = await udp(tun, remote_addr=(PEER_V6, 7))
        result["udp_local"] = await udp(tun, local_addr=("10.77.0.2", 0))
        infos = await tun.getaddrinfo(PEER_NAME, 8000, type=socket.SOCK_STREAM)
        result["gai"] = sorted([f, list(a)] for f, _t, _p, _c, a in infos)
        result["gai_unknown"] = await error_of(tun.getaddrinfo("nowhere.test", 80))
        result["refused"] = await error_of(tun.open_connection(PEER_V4, 1))
        result["outside"] = await error_of(tun.open_connection("10.99.0.1", 80))
        result["bad_host"] = await error_of(tun.channel.ask({"op": "connect", "host": PEER_NAME, "port": 80}))
        result["bad_op"] = await error_of(tun.channel.ask({"op": "mount", "host": "/"}))
        result["after_bad"] = await fetch(tun, PEER_V4, os.path.join(outdir, "after"))
        result["outside_udp"] = await error_of(
            tun.create_datagram_endpoint(Echoes, remote_addr=("10.99.0.1", 7))
        )
    say(**result)


async def server(conf):
    async with await vpncrypt.userspace.open_tunnel(conf) as tun:
        done = asyncio.get_running_loop().create_future()

        async def reverse(reader, writer):
            data = await reader.read()
            writer.write(data[::-1])
            await writer.drain()
            writer.close()
            if not done.done():
                done.set_result(len(data))

        srv = await tun.start_server(reverse, None, 0)
        say(port=srv.sockets[0].getsockname()[1])
        say(served=await done)
        # (the tunnel ends with the program: the reply's last bytes may still
        # be on their way, so the test says when it has them)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        srv.close()
        await srv.wait_closed()


async def hold(conf):
    tun = await vpncrypt.userspace.open_tunnel(conf)
    say(pid=tun.pid, name=tun.name)
    loop = asyncio.get_running_loop()
    line = await loop.run_in_executor(None, sys.stdin.readline)
    if line.strip() == "use":  # (the test killed the tunnel's process)
        say(error=await error_of(tun.open_connection(PEER_V4, 8000)))
        line = "close"
    if line.strip() == "close":
        await tun.aclose()
        say(closed=True)


async def from_object(conf):
    cfg = load_config(conf)
    async with await vpncrypt.userspace.open_tunnel(cfg) as tun:
        infos = await tun.getaddrinfo(PEER_NAME, 80, family=socket.AF_INET, type=socket.SOCK_STREAM)
    say(gai=[list(i[4]) for i in infos])


async def refused(conf):
    """open_tunnel's error, and the program's children after it."""
    error = await error_of(vpncrypt.userspace.open_tunnel(conf))
    with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as f:
        say(error=error, children=f.read().split())


def main():
    kind, conf, *rest = sys.argv[1:]
    run = {"traffic": traffic, "server": server, "hold": hold, "object": from_object, "refused": refused}[
        kind
    ]
    asyncio.run(run(conf, *rest))


if __name__ == "__main__":
    main()
