"""A SIGHUP while the interface is in another network namespace (the
outside review of issue 17): the file's peers are applied and the reload
succeeds; its Address lines, which belong to the namespace the interface
now lives in, are left alone with a warning (the whole reload used to be
reported failed after its peers had been applied)."""

import signal

from vpncrypt.protocol import keys


def test_reload_while_moved_applies_the_peers_and_leaves_the_addresses(lab):
    a = lab.node("A", "vpncrypt")
    first = keys.pubkey(keys.genkey())
    conf = a.conf([{"public": first, "inner": "10.66.0.2"}])
    a.start(conf)
    lab.run_in("A", "ip", "link", "set", a.iface, "netns", lab.ns["B"])
    second = keys.pubkey(keys.genkey())
    moved = a.conf([{"public": first, "inner": "10.66.0.2"}, {"public": second, "inner": "10.66.0.3"}])
    moved = moved.replace("Address = ", "Address = 10.55.0.1/24, ", 1)
    assert moved != conf
    a.write_conf(moved)
    a.proc.popen.send_signal(signal.SIGHUP)
    lab.wait_notify(a.proc, "READY=1")
    log = a.proc.log()
    assert "reload failed" not in log, log[-3000:]
    assert "reloaded" in log and "in another network namespace" in log, log[-3000:]
    assert set(a.dump()) == {first, second}
    # back home: nothing was half-done, the daemon still serves
    lab.run_in("B", "ip", "link", "set", a.iface, "netns", lab.ns["A"])
    assert a.proc.popen.poll() is None
