"""Randomness for the whole runtime: ``Rng``, the OS implementation and a seeded one for tests."""

from __future__ import annotations

import os
import threading
from typing import Protocol, runtime_checkable

__all__ = ["Rng", "SeededRng", "SystemRng"]


@runtime_checkable
class Rng(Protocol):
    def random_bytes(self, n: int) -> bytes: ...

    def random(self) -> float:
        """A float in [0, 1)."""
        ...


_POOL_BYTES = 4096
_POOLED_MAX = 16  # larger requests (secrets, keys) are read from the OS each time


class _Pool:
    """Small requests served from one read of the OS's randomness: an id's ten random bytes are
    otherwise one ``getrandom`` call each, a system call that also lets the interpreter's other
    threads take the GIL from the event loop. The bytes are the OS's, each handed out once; a
    forked child starts with none (``os.register_at_fork``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._buf = b""
        self._pos = 0

    def take(self, n: int) -> bytes:
        with self._lock:
            if self._pos + n > len(self._buf):
                self._buf, self._pos = os.urandom(_POOL_BYTES), 0
            out = self._buf[self._pos:self._pos + n]
            self._pos += n
            return out

    def forget(self) -> None:
        # In a forked child: another thread of the parent may have held the lock at the fork.
        self._lock = threading.Lock()
        self._buf, self._pos = b"", 0


_POOL = _Pool()
os.register_at_fork(after_in_child=_POOL.forget)


class SystemRng:
    """Cryptographic randomness from the OS."""

    def random_bytes(self, n: int) -> bytes:
        if 0 < n <= _POOLED_MAX:
            return _POOL.take(n)
        return os.urandom(n)

    def random(self) -> float:
        return int.from_bytes(os.urandom(7), "big") / (1 << 56)


class SeededRng:
    """Deterministic randomness for tests: the same seed gives the same sequence."""

    def __init__(self, seed: int = 0) -> None:
        import random  # tests only: a node's start does not import it

        self._r = random.Random(seed)

    def reseed(self, seed: int) -> None:
        self._r.seed(seed)

    def random_bytes(self, n: int) -> bytes:
        return self._r.randbytes(n)

    def random(self) -> float:
        return self._r.random()
