"""A listening UNIX socket at a path, with the mode and group the operator
chose, for the metrics (`--metrics unix:PATH`).

The socket is bound under a temporary name in the same directory, given
its mode and group there, and renamed onto PATH: it never exists at PATH
with other permissions, and rename() replaces what is at PATH without
following it (a symlink put there is replaced, never written through).
What is at PATH first must be a socket nobody answers on (one a killed
daemon left): a live one, or anything that is not a socket, is refused.
The directory is made if missing (mode 0755, so that the socket's group
can reach it) and refused if others can write to it (they could swap
names in it)."""

from __future__ import annotations

import errno
import os
import socket
import stat
from typing import Optional

from ..permissions import ensure_private_dir


class UnixListenError(OSError):
    """The socket cannot be made: the message is one line for the user."""


def _check_stale(path: str) -> None:
    """Nothing at `path`, or a socket nobody listens on; else UnixListenError."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise UnixListenError(errno.EEXIST, f"{path}: exists and is not a socket; refusing to replace it")
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        probe.settimeout(1.0)
        probe.connect(path)
    except ConnectionRefusedError:
        return  # stale: replaced below
    except OSError as e:
        raise UnixListenError(e.errno or errno.EIO, f"{path}: cannot tell whether it is in use: {e.strerror}")
    finally:
        probe.close()
    raise UnixListenError(errno.EADDRINUSE, f"{path}: another process listens on it")


def bind_unix_listener(
    path: str, mode: int, gid: Optional[int], backlog: int = 16
) -> tuple[socket.socket, tuple[int, int]]:
    """(the listening socket, (st_dev, st_ino) of its file at `path`)."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        made = not os.path.lexists(directory)
        ensure_private_dir(directory, 0o755)
        if made:  # (makedirs' mode goes through the umask: the unit's 0077 would make it 0700)
            os.chmod(directory, 0o755)
    except PermissionError as e:
        raise UnixListenError(errno.EPERM, str(e)) from None
    _check_stale(path)
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.tmp")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        try:
            os.unlink(tmp)  # one of this pid's, from before a kill -9 (never followed)
        except FileNotFoundError:
            pass
        sock.bind(tmp)
        try:
            os.chmod(tmp, mode)
            if gid is not None:
                _give_group(tmp, path, gid)
            sock.listen(backlog)
            os.rename(tmp, path)
        except BaseException:
            _unlink_quietly(tmp)
            raise
        st = os.lstat(path)
    except BaseException:
        sock.close()
        raise
    return sock, (st.st_dev, st.st_ino)


def _give_group(tmp: str, path: str, gid: int) -> None:
    try:
        os.chown(tmp, -1, gid, follow_symlinks=False)
    except PermissionError as e:
        # without CAP_CHOWN (the unit does not grant it) only a group the
        # daemon is in: systemd's SupplementaryGroups= puts it in one
        raise UnixListenError(
            e.errno,
            f"{path}: cannot give it group {gid}: {e.strerror} (the daemon must be in that group, "
            "e.g. SupplementaryGroups= in its unit, or hold CAP_CHOWN)",
        ) from None


def remove_unix_listener(path: str, ident: tuple[int, int]) -> None:
    """Unlink `path` if it is still the socket `ident` names (a later daemon
    may have put its own there)."""
    try:
        st = os.lstat(path)
    except OSError:
        return
    if (st.st_dev, st.st_ino) == ident:
        _unlink_quietly(path)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
