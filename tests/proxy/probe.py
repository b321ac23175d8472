"""Raw exchanges with the proxy's listeners, from inside its namespace.

    python -m tests.proxy.probe < CASES.json > ANSWERS.json

CASES: [[port, hex], ...] or [[port, hex, n], ...]; each case is a new
connection that sends its bytes (n at a time, each a segment of its own:
TCP_NODELAY), half-closes, and reads until the proxy closes (at most 20 s); the
answer is the hex of everything read and whether the proxy closed (rather
than the read timing out or being reset).
"""

import json
import socket
import sys


def exchange(port: int, data: str, n: int = 0) -> dict:
    got, closed = b"", False
    sent = bytes.fromhex(data)
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for i in range(0, len(sent), n or len(sent) or 1):
            s.sendall(sent[i : i + (n or len(sent))])
        s.shutdown(socket.SHUT_WR)
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    closed = True
                    break
                got += chunk
        except (socket.timeout, ConnectionResetError):
            pass
    return {"reply": got.hex(), "closed": closed}


if __name__ == "__main__":
    print(json.dumps([exchange(*case) for case in json.load(sys.stdin)]))
