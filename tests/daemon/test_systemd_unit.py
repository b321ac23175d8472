import os
import re
import shutil
import subprocess
import sysconfig


REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UNIT = os.path.join(REPO, "systemd", "vpncrypt@.service")


def _directives(text):
    out = {}
    section = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.setdefault((section, key.strip()), []).append(value.strip())
    return out


def test_unit_has_the_required_settings():
    d = _directives(open(UNIT).read())

    def get(k, s="Service"):
        return d.get((s, k), [None])[-1]

    assert get("Type") == "notify"
    assert get("ExecStart") == "/usr/local/bin/vpncrypt up %i -c /etc/vpncrypt/%i.conf"
    assert get("WatchdogSec") in ("30", "30s")
    assert get("Restart") == "on-failure"
    # a config that never loads: 5 starts within a minute, then failed for good
    assert get("StartLimitIntervalSec", "Unit") in ("60", "60s")
    assert get("StartLimitBurst", "Unit") == "5"
    assert get("RestartSec") in ("2", "2s")
    assert get("LimitNOFILE") == "1024"
    for k in ("CapabilityBoundingSet", "AmbientCapabilities"):
        assert set(get(k).split()) == {"CAP_NET_ADMIN", "CAP_NET_BIND_SERVICE"}
    assert get("NoNewPrivileges") == "yes"
    assert get("ProtectSystem") == "strict"
    assert get("ProtectHome") == "yes" and get("PrivateTmp") == "yes"
    assert get("DeviceAllow") == "/dev/net/tun rw"
    assert get("RuntimeDirectory") == "wireguard"
    assert get("RuntimeDirectoryMode") == "0700" and get("RuntimeDirectoryPreserve") == "yes"
    assert get("ReadOnlyPaths").lstrip("-") == "/etc/vpncrypt"
    assert get("ExecReload") and "HUP" in get("ExecReload")
    assert get("WantedBy", "Install") == "multi-user.target"


def _executable(tmp_path):
    """The installed `vpncrypt` script if there is one, else a stub: verify
    only checks that ExecStart names an executable."""
    for candidate in (os.path.join(sysconfig.get_path("scripts"), "vpncrypt"), shutil.which("vpncrypt")):
        if candidate and os.access(candidate, os.X_OK):
            return os.path.realpath(candidate)
    stub = tmp_path / "vpncrypt"
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    return str(stub)


def test_systemd_analyze_verify(tmp_path):
    exe_analyze = shutil.which("systemd-analyze")
    assert exe_analyze, "systemd-analyze is not installed (Debian's systemd; tests/run.sh installs it)"
    exe = _executable(tmp_path)
    text = open(UNIT).read()
    assert text.count("/usr/local/bin/vpncrypt") >= 1
    text = re.sub(r"^ExecStart=/usr/local/bin/vpncrypt ", f"ExecStart={exe} ", text, flags=re.M)
    unitdir = tmp_path / "units"
    unitdir.mkdir()
    (unitdir / "vpncrypt@.service").write_text(text)
    for target in ("vpncrypt@wg0.service", "vpncrypt@.service"):
        r = subprocess.run(
            [exe_analyze, "verify", "--man=no", str(unitdir / target)],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=str(unitdir),
        )
        output = (r.stdout + r.stderr).strip()
        ours = [line for line in output.splitlines() if "vpncrypt" in line]
        assert not ours, output
        assert r.returncode == 0, output


def test_verify_catches_mistakes(tmp_path):
    """The verify check above is not vacuous: a typo in the unit is reported."""
    exe_analyze = shutil.which("systemd-analyze")
    assert exe_analyze, "systemd-analyze is not installed (Debian's systemd; tests/run.sh installs it)"
    exe = _executable(tmp_path)
    text = open(UNIT).read().replace("/usr/local/bin/vpncrypt", exe)
    text = text.replace("NoNewPrivileges=yes", "NoNewPrivilege=yes")
    (tmp_path / "vpncrypt@.service").write_text(text)
    r = subprocess.run(
        [exe_analyze, "verify", "--man=no", str(tmp_path / "vpncrypt@wg0.service")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(tmp_path),
    )
    assert "NoNewPrivilege" in r.stdout + r.stderr
