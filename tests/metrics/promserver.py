"""A real Prometheus server (Debian's `prometheus` binary) for the metrics
tests: started in one of a Lab's namespaces with a generated config, its
data in the lab's temporary folder, listening on that namespace's loopback;
queried over its HTTP API.  Never a system service."""

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.parse

from tests.interop.lab import REPO, Proc

PROM_PORT = 9090


def need_prometheus():
    for tool in ("prometheus", "promtool"):
        assert shutil.which(tool), (
            f"{tool} not found: install Debian's `prometheus` package (tests/run.sh does)"
        )


def http_get(lab, side, url, accept=None, check=True, opts=()):
    """(content type, body) of a GET made inside the namespace; `opts`:
    http_get's --cafile, --user, --password."""
    cmd = [sys.executable, "-m", "tests.metrics.http_get", url] + ([accept] if accept else []) + list(opts)
    r = subprocess.run(["ip", "netns", "exec", lab.ns[side], *cmd], capture_output=True, timeout=30, cwd=REPO)
    if not check and r.returncode:
        return None, r.stderr.decode(errors="replace")
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    head, _, body = r.stdout.partition(b"\n")
    return head.decode().partition(": ")[2], body


class Prometheus:
    def __init__(self, lab, side, target, interval="1s", auth=None):
        """`auth`: (CA file, user, password) to scrape over TLS with basic auth."""
        need_prometheus()
        self.lab, self.side = lab, side
        self.dir = os.path.join(lab.tmp, "prometheus")
        os.makedirs(os.path.join(self.dir, "data"))
        conf = os.path.join(self.dir, "prometheus.yml")
        with open(conf, "w") as f:
            f.write(
                "global:\n"
                f"  scrape_interval: {interval}\n"
                f"  scrape_timeout: {interval}\n"
                "scrape_configs:\n"
                "  - job_name: vpncrypt\n"
                "    static_configs:\n"
                f"      - targets: ['{target}']\n"
            )
            if auth is not None:
                ca, user, password = auth
                f.write(
                    "    scheme: https\n"
                    f"    tls_config:\n      ca_file: {ca}\n"
                    f"    basic_auth:\n      username: {user}\n      password: '{password}'\n"
                )
        log = os.path.join(self.dir, "prometheus.log")
        with open(log, "wb") as out:
            p = subprocess.Popen(
                [
                    "ip",
                    "netns",
                    "exec",
                    lab.ns[side],
                    "prometheus",
                    f"--config.file={conf}",
                    f"--storage.tsdb.path={os.path.join(self.dir, 'data')}",
                    f"--web.listen-address=127.0.0.1:{PROM_PORT}",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.proc = Proc("prometheus", p, log)
        lab.procs.append(self.proc)  # stopped by lab.close()
        self.url = f"http://127.0.0.1:{PROM_PORT}"
        deadline = time.monotonic() + 30
        while True:
            assert p.poll() is None, f"prometheus exited:\n{self.proc.log()[-3000:]}"
            ctype, body = http_get(lab, side, self.url + "/-/ready", check=False)
            if ctype is not None:
                break
            assert time.monotonic() < deadline, f"prometheus not ready:\n{self.proc.log()[-3000:]}"
            time.sleep(0.3)

    def query(self, expr):
        """The result list of an instant query."""
        _, body = http_get(
            self.lab, self.side, self.url + "/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        )
        answer = json.loads(body)
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def latest(self, name, window="30s"):
        """{labels as a frozenset: (timestamp, value)} of the newest sample
        of each series of `name` (a range query keeps the samples' own
        timestamps: the scrape times)."""
        out = {}
        for series in self.query(f"{name}[{window}]"):
            ts, value = series["values"][-1]
            labels = dict(series["metric"])
            labels.pop("__name__", None)
            out[frozenset(labels.items())] = (float(ts), float(value))
        return out
