"""Raw exchanges with the proxy's listeners, from inside its namespace.

    python -m tests.proxy.probe < CASES.json > ANSWERS.json

CASES: [[port, hex], ...]; each case is a new connection that sends its
bytes, half-closes, and reads until the proxy closes (at most 20 s); the
answer is the hex of everything read and whether the proxy closed (rather
than the read timing out or being reset).
"""

import json
import socket
import sys


def exchange(port: int, data: str) -> dict:
    got, closed = b"", False
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        s.sendall(bytes.fromhex(data))
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
    print(json.dumps([exchange(port, data) for port, data in json.load(sys.stdin)]))
