"""Routes removed in one `ip -batch` (outside review: a reload from 10,001
peers to one ran one `ip route del` per network on the event loop, 14-25 s
without an answer, and a stop took 13-15 s against TimeoutStopSec=15s)."""

import subprocess
import sys
import textwrap
import uuid

CHILD = textwrap.dedent(
    """
    import ipaddress, json, subprocess, sys
    from vpncrypt.daemon import routes as R

    calls = []
    real = subprocess.run

    def counting(args, *a, **k):
        calls.append(list(args))
        return real(args, *a, **k)

    R.subprocess.run = counting
    subprocess.run(["ip", "tuntap", "add", "d0", "mode", "tun"], check=True)  # (no dummy module here)
    subprocess.run(["ip", "link", "set", "d0", "up"], check=True)
    r = R.Routes("d0", sys.argv[1] if sys.argv[1] != "auto" else None,
                 get_fwmark=lambda: 0, set_fwmark=lambda m: None)
    nets = [f"10.{i // 256}.{i % 256}.0/24" for i in range(1000)]
    r.sync(nets)
    listed = lambda: real(["ip", "-4", "route", "show", "table", "all", "dev", "d0"],
                          capture_output=True, text=True).stdout
    count = lambda text: sum(1 for ln in text.splitlines() if ln.startswith("10."))
    added = count(listed())
    calls.clear()
    r.sync(nets[:1])  # a reload down to one peer
    after_reload = listed()
    reload_calls = len(calls)
    # one route deleted by hand meanwhile: no error for it at the stop
    table = ["table", sys.argv[1]] if sys.argv[1] != "auto" else []
    subprocess.run(["ip", "route", "del", nets[0], "dev", "d0", *table], check=True)
    calls.clear()
    r.clear()
    kept = [ln.split()[0] for ln in after_reload.splitlines() if ln.startswith("10.")]
    print(json.dumps({"added": added, "reload_calls": reload_calls, "after_reload": kept,
                      "stop_calls": len(calls), "after_stop": count(listed()), "left": len(r.routes)}))
    """
)


def _run(table):
    ns = "vcrt" + uuid.uuid4().hex[:8]
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        r = subprocess.run(
            ["ip", "netns", "exec", ns, sys.executable, "-c", CHILD, table],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stderr
        import json

        return json.loads(r.stdout.strip().splitlines()[-1]), r.stderr
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def test_a_reload_to_one_peer_and_a_stop_are_one_command_each():
    for table in ("auto", "1234"):
        got, err = _run(table)
        assert got["added"] == 1000
        assert got["after_reload"] == ["10.0.0.0/24"]
        # one `ip -batch` to delete (and, with Table auto, the interface's routes listed per family)
        assert got["reload_calls"] <= 3, got
        assert got["after_stop"] == 0 and got["left"] == 0
        assert got["stop_calls"] == 1, got
        assert "cannot remove" not in err and "removing" not in err, err  # the route gone by hand is no error


def test_a_network_within_another_only_in_its_family():
    """Routes.sync leaves out a network a route already covers: inside it
    (or the same), in the same family only."""
    from ipaddress import ip_network as net

    from vpncrypt.daemon.routes import _within

    assert _within(net("10.1.2.0/24"), net("10.0.0.0/8")) and _within(net("10.0.0.0/8"), net("10.0.0.0/8"))
    assert not _within(net("10.0.0.0/8"), net("10.1.2.0/24"))
    assert _within(net("fd00::/64"), net("fd00::/8")) and not _within(net("fd00::/64"), net("fd01::/16"))
    assert not _within(net("::/0"), net("0.0.0.0/0")) and not _within(net("0.0.0.0/0"), net("::/0"))
