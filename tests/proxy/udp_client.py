"""A SOCKS5 UDP ASSOCIATE client for the tests, run in the proxy's namespace.

    python -m tests.proxy.udp_client SOCKS_PORT ANSWERS < CASES.json

CASES: [[frag, atyp, host, port, payload hex], ...].  One association (no
authentication, DST 0.0.0.0:0); every case's datagram sent to the relay,
then ANSWERS datagrams awaited (30 s each); prints them as JSON [[source
atyp, source host, source port, payload hex], ...], then closes the TCP
connection.
"""

import ipaddress
import json
import socket
import struct
import sys


def address(atyp: int, host: str) -> bytes:
    if atyp == 3:
        return bytes([len(host)]) + host.encode()
    return ipaddress.ip_address(host).packed


def open_association(port: int) -> tuple:
    tcp = socket.create_connection(("127.0.0.1", port), timeout=10)
    tcp.sendall(bytes([5, 1, 0]))
    assert tcp.recv(2) == bytes([5, 0])
    tcp.sendall(bytes([5, 3, 0, 1, 0, 0, 0, 0, 0, 0]))
    head = tcp.recv(4)
    assert head[:2] == bytes([5, 0]), head.hex()
    raw = tcp.recv(4 if head[3] == 1 else 16)
    (relay_port,) = struct.unpack("!H", tcp.recv(2))
    return (
        tcp,
        (str(ipaddress.ip_address(raw)), relay_port),
        socket.AF_INET if head[3] == 1 else socket.AF_INET6,
    )


def main() -> None:
    cases = json.load(sys.stdin)
    tcp, relay, family = open_association(int(sys.argv[1]))
    udp = socket.socket(family, socket.SOCK_DGRAM)
    udp.settimeout(30)
    for frag, atyp, host, port, payload in cases:
        head = bytes([0, 0, frag, atyp]) + address(atyp, host) + struct.pack("!H", port)
        udp.sendto(head + bytes.fromhex(payload), relay)
    out = []
    for _ in range(int(sys.argv[2])):
        data = udp.recv(65535)
        n = 4 if data[3] == 1 else 16
        src = str(ipaddress.ip_address(data[4 : 4 + n]))
        (sport,) = struct.unpack("!H", data[4 + n : 6 + n])
        out.append([data[3], src, sport, data[6 + n :].hex()])
    print(json.dumps(out))
    tcp.close()


if __name__ == "__main__":
    main()
