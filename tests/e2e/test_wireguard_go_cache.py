"""tests/tools/fetch-wireguard-go.sh keeps one build per suite: fetching sid
(the e2e suite's wireguard-go) leaves trixie's (the interop tests') in place,
a cached build is used without apt, and a new build replaces only its own
suite's stale ones.  apt-get is a stand-in on PATH that builds a tiny package
(no network); dpkg-deb and dpkg -x are the real ones."""

import os
import shutil
import stat
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FETCH = os.path.join(REPO, "tests", "tools", "fetch-wireguard-go.sh")

FAKE_APT = r"""#!/bin/bash
# records the call, and for `download` builds wireguard-go_*.deb in the cwd
echo "$*" >> "$FAKE_APT_LOG"
for a in "$@"; do
    if [ "$a" = download ]; then
        pkg=$(mktemp -d)
        mkdir -p "$pkg/DEBIAN" "$pkg/usr/bin"
        printf 'Package: wireguard-go\nVersion: 9.9-1\nArchitecture: %s\n' "$(dpkg --print-architecture)" \
            > "$pkg/DEBIAN/control"
        printf 'Maintainer: t <t@t>\nDescription: t\n' >> "$pkg/DEBIAN/control"
        printf '#!/bin/sh\necho wireguard-go stand-in\n' > "$pkg/usr/bin/wireguard-go"
        chmod 755 "$pkg/usr/bin/wireguard-go"
        dpkg-deb --build -Zgzip "$pkg" "$PWD/wireguard-go_9.9-1.deb" >/dev/null
        rm -rf "$pkg"
    fi
done
"""


@pytest.fixture
def env(tmp_path):
    for tool in ("dpkg", "dpkg-deb", "sha256sum", "python3"):
        assert shutil.which(tool), f"required tool {tool!r} is not installed"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "apt-get"
    fake.write_text(FAKE_APT)
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    cache = tmp_path / "cache"
    log = tmp_path / "apt.log"
    log.touch()
    return (
        {
            **os.environ,
            "PATH": f"{bindir}:{os.environ['PATH']}",
            "VPNCRYPT_WGGO_CACHE": str(cache),
            "FAKE_APT_LOG": str(log),
        },
        cache,
        log,
    )


def fetch(env, suite):
    r = subprocess.run(["bash", FETCH, suite], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    path = r.stdout.strip()
    assert os.access(path, os.X_OK), path
    return path


def downloads(log):
    return sum(1 for line in log.read_text().splitlines() if "download" in line.split())


def test_one_build_per_suite(env):
    env, cache, log = env
    arch = subprocess.run(
        ["dpkg", "--print-architecture"], capture_output=True, text=True, check=True
    ).stdout.strip()
    cache.mkdir()
    legacy = cache / "0123456789abcdef"  # a build named by key alone (older script)
    (legacy / "usr" / "bin").mkdir(parents=True)
    trixie = fetch(env, "trixie")
    assert not legacy.exists()
    sid = fetch(env, "sid")
    assert os.path.exists(trixie), "fetching sid evicted trixie's build"
    assert trixie != sid
    assert os.path.relpath(trixie, cache).split(os.sep)[0].startswith(f"trixie-{arch}-")
    assert os.path.relpath(sid, cache).split(os.sep)[0].startswith(f"sid-{arch}-")
    assert downloads(log) == 2
    # cached: no apt at all
    assert fetch(env, "trixie") == trixie and fetch(env, "sid") == sid
    assert downloads(log) == 2
    # a stale trixie build (another script version) goes at trixie's next
    # build; sid's stays
    stale = cache / f"trixie-{arch}-0000000000000000"
    (stale / "usr" / "bin").mkdir(parents=True)
    os.unlink(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(trixie))), ".vpncrypt-package"))
    assert fetch(env, "trixie") == trixie
    assert downloads(log) == 3
    assert not stale.exists()
    assert os.path.exists(sid)
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        os.path.relpath(p, cache).split(os.sep)[0] for p in (sid, trixie)
    )


def test_a_bad_suite_name_is_refused(env):
    env, cache, log = env
    r = subprocess.run(["bash", FETCH, "../x"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "bad suite name" in r.stderr
    assert downloads(log) == 0
