"""Debian packages the tests need and a bare machine lacks (Chromium and its driver, promtool),
installed with apt-get as root when missing. One install at a time on the machine: the suite runs
in two worker processes (``make test``), and two `apt-get install`s at once fail on dpkg's lock."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from collections.abc import Callable

_LOCK = "/tmp/mailbox-actors-tests-apt.lock"


def apt_install(packages: list[str], present: Callable[[], bool], *, why: str) -> None:
    """Install ``packages`` unless ``present()``; fail (never skip) when that is impossible here.
    A bare machine's package lists may be empty: they are fetched once when the install fails."""
    if present():
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise RuntimeError(f"{why} need Debian's {' and '.join(packages)}: "
                           f"apt-get install {' '.join(packages)} (as root)")
    with open(_LOCK, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # the other worker may be installing: wait for it
        if present():
            return
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = ["apt-get", "install", "-y", "--no-install-recommends", *packages]
        if subprocess.run(install, env=env, capture_output=True, timeout=900).returncode != 0:
            subprocess.run(["apt-get", "update"], env=env, check=True, capture_output=True,
                           timeout=900)
            subprocess.run(install, env=env, check=True, capture_output=True, timeout=900)
