"""The README and docs/ against the code: what can be checked mechanically.

- README.md stays a guide: under 200 lines, and its first code block holds
  the two commands .ci/run runs (the main job and the tests), unchanged;
  its key step does what it says (`wg`'s output, a warning for a key file
  others can read);
- docs/metrics.md's tables name every drop reason the code can count and
  every counter `vpncrypt show --json` prints, and nothing else: the drop
  reasons are vpncrypt.drop_reasons.DropReason's (which a real daemon lists
  in `show --json` and its metrics, and no drop site names by a string),
  the counters from a real daemon started with every option that adds some
  (two queues, the fair queue);
- every relative link in README.md and docs/*.md resolves, to a file and,
  with a #fragment, to a heading there; every repository path the text names
  in backquotes exists.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import subprocess
import sys
import time

import pytest

from tests.installed import script

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(REPO, "README.md")
DOCS = os.path.join(REPO, "docs")
METRICS = os.path.join(DOCS, "metrics.md")


def _read(path: str) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _markdown_files() -> list[str]:
    docs = sorted(os.path.join(DOCS, n) for n in os.listdir(DOCS) if n.endswith(".md"))
    return [README, *docs]


# ------------------------------------------------------------------ README


def test_readme_is_short():
    lines = _read(README).splitlines()
    assert len(lines) < 200, f"README.md has {len(lines)} lines; the reference belongs in docs/"


def test_readme_first_code_block_is_the_ci_commands():
    """.ci/run reads these two lines and runs them (awk: the first fenced
    block, its non-blank lines)."""
    lines = _read(README).splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("```"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].startswith("```"))
    commands = [line for line in lines[start + 1 : end] if line.strip()]
    assert commands == [
        "python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/vpncrypt loopback-bench",
        "tests/run.sh",
    ]


def _key_command(command: str, mode: int, tmp_path, stdin: bytes = b"") -> tuple[str, str]:
    """`vpncrypt COMMAND > FILE` where the shell made FILE with `mode`:
    (what FILE holds, stderr)."""
    out = tmp_path / f"{command}.{mode:o}"
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    os.fchmod(fd, mode)  # whatever this process's umask is
    try:
        r = subprocess.run([script("vpncrypt"), command], stdout=fd, stderr=subprocess.PIPE, input=stdin)
    finally:
        os.close(fd)
    assert r.returncode == 0, r.stderr
    return out.read_text(), r.stderr.decode()


def test_readme_key_step(tmp_path):
    """Step 2 of the README: `vpncrypt genkey` / `pubkey` print what `wg
    genkey` / `wg pubkey` print (one base64 line each), and, as wg does, a
    secret written into a file others can read gets a warning."""
    private, err = _key_command("genkey", 0o600, tmp_path)
    assert err == ""
    assert re.fullmatch(r"[A-Za-z0-9+/]{42}[AEIMQUYcgkosw048]=\n", private)
    public, err = _key_command("pubkey", 0o600, tmp_path, stdin=private.encode())
    wg = subprocess.run(["wg", "pubkey"], input=private, capture_output=True, text=True, check=True)
    assert public == wg.stdout and err == ""
    for command in ("genkey", "genpsk"):
        secret, err = _key_command(command, 0o644, tmp_path)
        assert len(secret) == 45 and "umask 077" in err, err
        assert secret not in err


# ------------------------------------------------------------------ metrics.md's tables


def _table_names(text: str, heading: str) -> set[str]:
    """The backquoted names in the first column of the first table under
    `heading` (a cell may hold several, comma-separated)."""
    lines = text.splitlines()
    at = lines.index(heading)
    names: set[str] = set()
    in_table = False
    for line in lines[at + 1 :]:
        if line.startswith("#"):
            break
        if line.startswith("|"):
            in_table = True
            first = line.split("|")[1]
            names.update(re.findall(r"`([A-Za-z0-9_]+)`", first))
        elif in_table:
            break
    return names


def code_drop_reasons() -> set[str]:
    from vpncrypt.drop_reasons import DropReason

    return {r.value for r in DropReason}


def test_every_drop_reason_is_documented():
    reasons = code_drop_reasons()
    # every layer's (so the enum is the whole list): the session table's, the
    # protocol core's, the sockets' and the fair queue's
    assert {"bad_mac1", "staged_flushed", "socket_overflow", "truncated", "aqm", "fq_codel"} <= reasons
    documented = _table_names(_read(METRICS), "## Drop reasons")
    assert reasons - documented == set(), "drop reasons missing from docs/metrics.md"
    assert documented - reasons == set(), "docs/metrics.md documents reasons the code does not count"


# A drop named by a bare string: `.drop("...")`, or a "drop_NAME" counter
# name written out (the UAPI's and the metrics' "drop_" prefix alone is fine).
_BARE_DROP = re.compile(r"""\.drop\(\s*f?["']|["']drop_[a-z0-9_]+["']""")


def test_no_drop_site_names_a_reason_by_a_bare_string():
    """Every drop is named by a DropReason member (vpncrypt.drop_reasons): a
    scan of the package's sources for a reason passed or keyed as a string."""
    found = []
    for folder, _dirs, files in os.walk(os.path.join(REPO, "vpncrypt")):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                for number, line in enumerate(_read(path).splitlines(), 1):
                    if _BARE_DROP.search(line):
                        found.append(f"{os.path.relpath(path, REPO)}:{number}: {line.strip()}")
    assert found == []
    # the scan finds what it looks for
    assert _BARE_DROP.search('dev.drop("no_route")') and _BARE_DROP.search('out["drop_aqm"] = 1')
    assert not _BARE_DROP.search('out["drop_" + reason] = n') and not _BARE_DROP.search(
        "dev.drop(R.NO_ROUTE)"
    )


def _show_json_with_every_option() -> tuple[dict, str]:
    """`vpncrypt show IFACE --json` of a daemon in a namespace of its own,
    with two queues and the fair queue (the options that add counters), and
    a scrape of its metrics."""
    from vpncrypt.protocol import keys

    ns = f"docs-{secrets.token_hex(4)}"
    iface = f"vcd{secrets.token_hex(4)}"
    conf = f"/tmp/{iface}.conf"
    log = f"/tmp/{iface}.log"
    fd = os.open(conf, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"[Interface]\nPrivateKey = {keys.genkey()}\n\n")
        f.write(f"[Peer]\nPublicKey = {keys.pubkey(keys.genkey())}\nAllowedIPs = 10.77.0.2/32\n")
    subprocess.run(["ip", "netns", "add", ns], check=True)
    subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)  # the metrics' address
    daemon = None
    try:
        with open(log, "w") as out:
            daemon = subprocess.Popen(
                ["ip", "netns", "exec", ns, script("vpncrypt"), "up", iface, "-c", conf]
                + ["--queues", "2", "--fair-queue", "--threads", "1", "--metrics", "127.0.0.1:9586"],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        # wait for its "IFACE up:" line (the deadline only guards a hang)
        deadline = time.monotonic() + 120
        while f"{iface} up:" not in _read(log):
            assert daemon.poll() is None, _read(log)
            assert time.monotonic() < deadline, _read(log)
            time.sleep(0.1)
        r = subprocess.run(
            [script("vpncrypt"), "show", iface, "--json"], capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, r.stderr
        (interface,) = json.loads(r.stdout)["interfaces"]
        fetch = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9586/metrics').read().decode())"
        scrape = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-c", fetch],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert scrape.returncode == 0, scrape.stderr
        return interface, scrape.stdout
    finally:
        if daemon is not None:
            daemon.terminate()
            daemon.wait(timeout=60)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for path in (conf, log):
            if os.path.exists(path):
                os.unlink(path)


@pytest.fixture(scope="module")
def running():
    return _show_json_with_every_option()


def test_every_counter_of_show_json_is_documented(running):
    interface, _scrape = running
    assert interface["implementation"] == "vpncrypt"
    # queue_0_rx_packets, queue_1_rx_packets ...: documented once, as queue_K_rx_packets
    counters = {re.sub(r"^queue_\d+_", "queue_K_", name) for name in interface["counters"]}
    assert {"queues", "queue_K_rx_packets", "fair_queue_packets", "open_fds"} <= counters
    documented = _table_names(_read(METRICS), "## Counters")
    assert counters - documented == set(), "counters missing from docs/metrics.md"
    assert documented - counters == set(), "docs/metrics.md documents counters show --json does not print"


def test_every_drop_reason_is_in_show_json_and_the_metrics(running):
    """A running interface (with the fair queue, whose reasons are there only
    with it) lists every DropReason from the start, at 0: in `vpncrypt show
    --json`, and in the metrics (cookie_sent as the cookie replies' family);
    mostly at 0 (the TUN's own IPv6 router solicitations may have counted
    no_route already)."""
    interface, scrape = running
    reasons = code_drop_reasons()
    assert set(interface["drops"]) == reasons
    assert all(isinstance(n, int) and n >= 0 for n in interface["drops"].values())
    scraped = set(re.findall(r'^vpncrypt_drops_total\{[^}]*reason="([a-z0-9_]+)"', scrape, re.M))
    assert scraped == reasons - {"cookie_sent"}
    assert re.search(r"^vpncrypt_cookie_replies_sent_total\{[^}]*\} ", scrape, re.M)
