"""Your own actor classes in ``serve`` and ``cluster`` (UI-7): ``--objects package.module:Class``
(repeatable; ``objects = [...]`` in the TOML file; ``MAILBOX_ACTORS_OBJECTS`` comma-separated),
served beside the platform's objects, as ``wrangler dev`` runs a worker.

A spec that does not import, names no ``Actor`` subclass, or takes a namespace already served is a
``SettingsError`` naming the setting, before anything serves. The working directory is importable
(as for ``python -m``), so a project's own modules load from where the command runs.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mailbox_actors.node.config import OBJECT_SPEC
from mailbox_actors.runtime.classes import DeferredActor
from mailbox_actors.runtime.settings import SettingsError

if TYPE_CHECKING:  # imported with the user's first class: serve without one answers before it
    from mailbox_actors.runtime.actor import Actor

__all__ = ["check_spec", "load_objects", "served_entries", "served_objects"]


def check_spec(spec: str) -> None:
    if not isinstance(spec, str) or not OBJECT_SPEC.fullmatch(spec):
        raise SettingsError(f"setting 'objects' takes package.module:Class entries (got {spec!r})")


def load_objects(specs: Sequence[str]) -> list[type[Actor]]:
    """The classes ``specs`` name, imported and checked (see the module doc)."""
    if not specs:
        return []
    from mailbox_actors.runtime.actor import Actor

    here = os.getcwd()
    if here not in sys.path:
        sys.path.insert(0, here)
    out: list[type[Actor]] = []
    for spec in specs:
        check_spec(spec)
        module_name, _, attr = spec.partition(":")
        try:
            found: object = importlib.import_module(module_name)
        except Exception as e:  # the user's module: any error of theirs, said with its setting
            raise SettingsError(f"setting 'objects': cannot import {module_name!r} for {spec!r} "
                                f"({type(e).__name__}: {e})") from None
        for part in attr.split("."):
            found = getattr(found, part, None)
            if found is None:
                raise SettingsError(f"setting 'objects': {module_name!r} has no {attr!r}")
        if not (isinstance(found, type) and issubclass(found, Actor)) or found is Actor:
            raise SettingsError(f"setting 'objects': {spec!r} is not a subclass of "
                                "mailbox_actors.Actor")
        if found not in out:
            out.append(found)
    return out


def served_entries(specs: Sequence[str]) -> list[type[Actor] | DeferredActor]:
    """The platform's objects (by name: each imported at its first use) and the user's (imported
    now, so that a spec that does not load stops the start), each namespace once."""
    from mailbox_actors.objects import deferred_objects

    entries: list[type[Actor] | DeferredActor] = [*deferred_objects()]
    seen = {entry.namespace: entry for entry in entries}
    for cls in load_objects(specs):
        namespace = getattr(cls, "namespace", None)
        if not isinstance(namespace, str):
            raise SettingsError(f"setting 'objects': {cls.__qualname__} declares no namespace")
        if namespace in seen:
            served = seen[namespace]
            by = (served.__qualname__ if isinstance(served, type)
                  else f"the platform's {namespace} object")
            raise SettingsError(f"setting 'objects': {cls.__qualname__}'s namespace {namespace!r} "
                                f"is already served by {by}")
        seen[namespace] = cls
        entries.append(cls)
    return entries


def served_objects(specs: Sequence[str]) -> list[type[Actor]]:
    """``served_entries``, every class imported."""
    return [entry.load() if isinstance(entry, DeferredActor) else entry
            for entry in served_entries(specs)]
