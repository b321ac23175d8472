"""GET a URL and write the body to stdout (run inside a test's network
namespace, where the test process cannot connect): python -m
tests.metrics.http_get URL [ACCEPT] [--cafile F] [--user U --password P].
Exit 1 with the error on stderr."""

import argparse
import base64
import ssl
import sys
import urllib.request


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("url")
    p.add_argument("accept", nargs="?")
    p.add_argument("--cafile")
    p.add_argument("--user")
    p.add_argument("--password", default="")
    a = p.parse_args()
    req = urllib.request.Request(a.url)
    if a.accept:
        req.add_header("Accept", a.accept)
    if a.user is not None:
        req.add_header(
            "Authorization", "Basic " + base64.b64encode(f"{a.user}:{a.password}".encode()).decode()
        )
    context = ssl.create_default_context(cafile=a.cafile) if a.cafile else None
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as r:
            sys.stdout.write(f"content-type: {r.headers.get('Content-Type')}\n")
            sys.stdout.flush()
            sys.stdout.buffer.write(r.read())
    except OSError as e:
        print(f"{a.url}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
