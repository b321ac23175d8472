"""Permission checks for files and directories that hold secrets."""

from __future__ import annotations

import os
import stat


def secret_file_problem(
    path: str, st: os.stat_result | None = None, what: str = "a private key"
) -> str | None:
    """Why ``path`` (holding `what`, a secret) is unsafe, or None if it is fine.

    Unsafe: readable/writable/executable by group or others (mode & 0o077), or
    owned by a user other than root or the daemon's own user.
    """
    if st is None:
        st = os.stat(path)
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o077:
        return (
            f"{path}: holds {what} but is accessible by group or others "
            f"(mode {mode:04o}); fix it with `chmod 600 {path}`"
        )
    if st.st_uid not in (0, os.geteuid()):
        return f"{path}: holds {what} but is owned by uid {st.st_uid}; fix it with `chown root {path}`"
    return None


def check_secret_file(path: str, st: os.stat_result | None = None) -> None:
    problem = secret_file_problem(path, st)
    if problem:
        raise PermissionError(problem)


def ensure_private_dir(path: str, mode: int = 0o700) -> None:
    """Create ``path`` (and parents) if missing; refuse a directory that other
    users could write to or that someone else owns."""
    os.makedirs(path, mode=mode, exist_ok=True)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode):
        raise PermissionError(f"{path}: not a directory")
    if st.st_uid not in (0, os.geteuid()):
        raise PermissionError(f"{path}: owned by uid {st.st_uid}, not by root or us")
    if stat.S_IMODE(st.st_mode) & 0o022:
        raise PermissionError(
            f"{path}: writable by group or others "
            f"(mode {stat.S_IMODE(st.st_mode):04o}); fix it with "
            f"`chmod go-w {path}`"
        )
