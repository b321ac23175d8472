"""A DNS server of the test's own, for a daemon in one of the lab's
namespaces, whose answers the test changes while the daemon runs.

`ip netns exec NS` bind-mounts /etc/netns/NS/resolv.conf and
/etc/netns/NS/hosts over /etc's, so what starts there asks this server
(127.0.0.1:53 in NS, one try of one second: a failure is seen at once).
The answers are read from a JSON file at each query, {name: answer}, an
answer being an IPv4 address (an A record; AAAA queries get no records),
"servfail" (the resolver cannot answer now: EAI_AGAIN) or "nxdomain" (no
such name: EAI_NONAME); a name not in the file is "nxdomain".

    python -m tests.interop.lab_dns ANSWERS.json    # the server (in NS)
"""

import json
import os
import shutil
import sys
import time


class LabDNS:
    """The server in the lab's namespace `side`, and the files that point
    that namespace at it; close() removes both."""

    def __init__(self, lab, side, answers=None):
        self.lab = lab
        self.ns = lab.ns[side]
        self.path = os.path.join(lab.tmp, f"dns-{side}.json")
        self.etc = os.path.join("/etc/netns", self.ns)
        self.set(answers or {})
        os.makedirs(self.etc, exist_ok=True)
        with open(os.path.join(self.etc, "resolv.conf"), "w") as f:
            f.write("nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        with open(os.path.join(self.etc, "hosts"), "w") as f:
            f.write("127.0.0.1 localhost\n::1 localhost\n")
        self.proc = lab.popen_in(side, sys.executable, "-m", "tests.interop.lab_dns", self.path)
        line = self.proc.stdout.readline()
        assert "listening" in line, f"the lab DNS server did not start: {self.proc.stderr.read()}"

    def set(self, answers: dict) -> None:
        """The answers from now on (the file replaced whole: a query never
        reads half of it)."""
        tmp = self.path + ".new"
        with open(tmp, "w") as f:
            json.dump(answers, f)
        os.replace(tmp, self.path)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        shutil.rmtree(self.etc, ignore_errors=True)


def serve(path: str) -> None:
    from dnslib import AAAA, QTYPE, RCODE, RR, A
    from dnslib.server import BaseResolver, DNSServer

    class Answers(BaseResolver):
        def resolve(self, request, handler):
            name = str(request.q.qname).rstrip(".").lower()
            try:
                with open(path) as f:
                    answer = json.load(f).get(name, "nxdomain")
            except (OSError, ValueError):
                answer = "servfail"
            reply = request.reply()
            if answer == "servfail":
                reply.header.rcode = RCODE.SERVFAIL
            elif answer == "nxdomain":
                reply.header.rcode = RCODE.NXDOMAIN
            elif request.q.qtype == QTYPE.A and "." in answer:
                reply.add_answer(RR(request.q.qname, QTYPE.A, rdata=A(answer), ttl=0))
            elif request.q.qtype == QTYPE.AAAA and ":" in answer:
                reply.add_answer(RR(request.q.qname, QTYPE.AAAA, rdata=AAAA(answer), ttl=0))
            return reply

    class Quiet:
        def __getattr__(self, _name):
            return lambda *a, **kw: None

    server = DNSServer(Answers(), address="127.0.0.1", port=53, logger=Quiet())
    server.start_thread()  # (the socket is bound by now)
    print(json.dumps({"listening": True}), flush=True)
    while server.isAlive():
        time.sleep(1)


if __name__ == "__main__":
    serve(sys.argv[1])
