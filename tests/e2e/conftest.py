"""Every end-to-end scenario runs against both implementations:

- `vpncrypt-go`: the venv's script (next to sys.executable), wireguard-go's
  command line;
- `wireguard-go`: the newest Debian has (unstable's), given by
  $VPNCRYPT_WIREGUARD_GO_NEWEST (tests/run.sh fetches it with
  `tests/tools/fetch-wireguard-go.sh sid`).

Both must pass.  A scenario where wireguard-go passes and vpncrypt fails is
a vpncrypt bug; until it is fixed it carries `impls(vpncrypt_bug=...)` (a
strict xfail on the vpncrypt-go case only, so the fix turns it into a
failure that asks for the mark to go).  Where neither implementation does
what the Linux module does, `impls(both_fail=...)` says why."""

import os

import pytest

from tests.e2e.netns import SOCKET_DIR, World
from tests.installed import script

IMPLS = ("vpncrypt-go", "wireguard-go")


def binary(impl: str) -> str:
    if impl == "vpncrypt-go":
        return script("vpncrypt-go")
    path = os.environ.get("VPNCRYPT_WIREGUARD_GO_NEWEST")
    assert path, (
        "VPNCRYPT_WIREGUARD_GO_NEWEST is not set: the end-to-end suite needs the "
        "newest wireguard-go; tests/run.sh sets it, or run "
        "`export VPNCRYPT_WIREGUARD_GO_NEWEST=$(bash tests/tools/fetch-wireguard-go.sh sid)`"
    )
    assert os.access(path, os.X_OK), f"VPNCRYPT_WIREGUARD_GO_NEWEST={path}: not an executable"
    return path


def impls(vpncrypt_bug: str = None, both_fail: str = None, wireguard_go_bug: str = None):
    """Parametrise a test over both implementations.  `vpncrypt_bug`: why
    vpncrypt-go fails it today (a strict xfail, to be removed by the fix).
    `both_fail`: why neither passes the Linux module's behaviour (strict
    xfails on both: the day one passes, the mark must go).
    `wireguard_go_bug`: where wireguard-go itself misses WireGuard's
    semantics (vpncrypt must pass)."""
    vc, go = [], []
    if vpncrypt_bug:
        vc.append(pytest.mark.xfail(strict=True, reason=f"vpncrypt bug: {vpncrypt_bug}"))
    if both_fail:
        vc.append(pytest.mark.xfail(strict=True, reason=f"vpncrypt bug: {both_fail}"))
        go.append(pytest.mark.xfail(strict=True, reason=f"wireguard-go too: {both_fail}"))
    if wireguard_go_bug:
        go.append(pytest.mark.xfail(strict=True, reason=f"wireguard-go bug: {wireguard_go_bug}"))
    return pytest.mark.parametrize(
        "impl", [pytest.param("vpncrypt-go", marks=vc), pytest.param("wireguard-go", marks=go)]
    )


@pytest.fixture
def world(impl):
    """Three namespaces (ns0, ns1, ns2) for one scenario.  At the end every
    daemon must exit once its interface is deleted (wherever it lives then),
    leaving no interface and no UAPI socket behind."""
    w = World(binary(impl))
    try:
        yield w
    finally:
        problems = w.close()
    leftovers = sorted(f for f in (os.listdir(SOCKET_DIR) if os.path.isdir(SOCKET_DIR) else ()) if w.id in f)
    leftovers += (
        [f"namespace {ns}" for ns in os.listdir("/run/netns") if w.id in ns]
        if os.path.isdir("/run/netns")
        else []
    )
    assert not problems and not leftovers, "\n".join(problems + leftovers)
