"""The UAPI socket's directory as a used machine has it: made 0700 when it is
missing, taken as it is when root made it without group/other write (0755 is
what wireguard-go's `os.MkdirAll(..., 0755)` leaves in /var/run/wireguard),
refused when someone else could replace the socket in it."""

import os
import stat

import pytest

from vpncrypt.permissions import ensure_private_dir


def test_missing_directory_is_made_0700(tmp_path):
    d = tmp_path / "a" / "wireguard"
    ensure_private_dir(str(d))
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o700


def test_a_0755_directory_left_by_wireguard_go_is_used_unchanged(tmp_path):
    d = tmp_path / "wireguard"
    d.mkdir()
    os.chmod(d, 0o755)
    ensure_private_dir(str(d))
    assert stat.S_IMODE(os.stat(d).st_mode) == 0o755


@pytest.mark.parametrize("mode", [0o775, 0o757, 0o777, 0o1777])
def test_a_directory_others_can_write_is_refused(tmp_path, mode):
    d = tmp_path / "wireguard"
    d.mkdir()
    os.chmod(d, mode)
    with pytest.raises(PermissionError, match="writable by group or others"):
        ensure_private_dir(str(d))


def test_a_directory_owned_by_another_user_is_refused(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("this test needs root (to chown the directory)")
    d = tmp_path / "wireguard"
    d.mkdir()
    os.chown(d, 65534, 65534)
    with pytest.raises(PermissionError, match="owned by uid 65534"):
        ensure_private_dir(str(d))
