"""GET /metrics from a vpncrypt metrics server, over TCP (http://, https://)
or a UNIX socket (unix:PATH), with a CA file and basic auth if given:

    python3 tests/metrics/scrape_client.py TARGET [--cafile F] [--user U --password P]

Prints "status: N" and the body (exit 0), or "error: ..." (exit 2) when no
HTTP answer came.  Standard library only: the tests run it as other users
(setpriv) with the system's python3, in a test's network namespace."""

import argparse
import base64
import http.client
import socket
import ssl
import sys


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout=10):
        super().__init__("localhost", timeout=timeout)
        self.path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.path)
        self.sock = s


def _connection(target, cafile):
    if target.startswith("unix:"):
        return _UnixConnection(target[5:])
    scheme, _, hostport = target.partition("://")
    host, _, port = hostport.rpartition(":")
    if scheme == "https":
        ctx = ssl.create_default_context(cafile=cafile)
        return http.client.HTTPSConnection(host.strip("[]"), int(port), timeout=10, context=ctx)
    return http.client.HTTPConnection(host.strip("[]"), int(port), timeout=10)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("target")
    p.add_argument("--cafile")
    p.add_argument("--user")
    p.add_argument("--password", default="")
    a = p.parse_args()
    headers = {}
    if a.user is not None:
        token = base64.b64encode(f"{a.user}:{a.password}".encode()).decode()
        headers["Authorization"] = "Basic " + token
    try:
        c = _connection(a.target, a.cafile)
        c.request("GET", "/metrics", headers=headers)
        r = c.getresponse()
        body = r.read()
    except (OSError, http.client.HTTPException) as e:
        print(f"error: {type(e).__name__}: {e}")
        return 2
    sys.stdout.write(f"status: {r.status}\n")
    sys.stdout.flush()
    sys.stdout.buffer.write(body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
