"""Randomness for the whole runtime: ``Rng``, the OS implementation and a seeded one for tests."""

from __future__ import annotations

import os
import random
from typing import Protocol, runtime_checkable

__all__ = ["Rng", "SeededRng", "SystemRng"]


@runtime_checkable
class Rng(Protocol):
    def random_bytes(self, n: int) -> bytes: ...

    def random(self) -> float:
        """A float in [0, 1)."""
        ...


class SystemRng:
    """Cryptographic randomness from the OS."""

    def random_bytes(self, n: int) -> bytes:
        return os.urandom(n)

    def random(self) -> float:
        return int.from_bytes(os.urandom(7), "big") / (1 << 56)


class SeededRng:
    """Deterministic randomness for tests: the same seed gives the same sequence."""

    def __init__(self, seed: int = 0) -> None:
        self._r = random.Random(seed)

    def reseed(self, seed: int) -> None:
        self._r.seed(seed)

    def random_bytes(self, n: int) -> bytes:
        return self._r.randbytes(n)

    def random(self) -> float:
        return self._r.random()
