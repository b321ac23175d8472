"""GET a URL and write the body to stdout (run inside a test's network
namespace, where the test process cannot connect): python -m
tests.metrics.http_get URL [ACCEPT].  Exit 1 with the error on stderr."""

import sys
import urllib.request


def main() -> int:
    req = urllib.request.Request(sys.argv[1])
    if len(sys.argv) > 2:
        req.add_header("Accept", sys.argv[2])
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            sys.stdout.write(f"content-type: {r.headers.get('Content-Type')}\n")
            sys.stdout.flush()
            sys.stdout.buffer.write(r.read())
    except OSError as e:
        print(f"{sys.argv[1]}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
