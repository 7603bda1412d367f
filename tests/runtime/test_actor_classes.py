"""Actor classes known by namespace and imported at first use (``runtime.classes``; PERF, issue 28:
a node start imports no object's code): a deferred class is loaded once, at its first lookup, and
checked then; it must declare the namespace it was registered under; the platform's deferred
objects are the DEFAULT_OBJECTS, namespace for namespace."""

from __future__ import annotations

from typing import Any

import pytest

from actors_for_tests import Scratch
from mailbox_actors.objects import DEFAULT_OBJECTS, deferred_objects
from mailbox_actors.runtime.classes import ActorClasses, DeferredActor


def test_a_deferred_class_is_loaded_once_at_its_first_lookup() -> None:
    """Known (listed, contained) before its import; ``get`` imports and checks it once."""
    loads: list[str] = []
    checked: list[Any] = []

    def load() -> Any:
        loads.append(Scratch.namespace)
        return Scratch

    classes = ActorClasses(on_load=checked.append)
    assert classes.add(DeferredActor(Scratch.namespace, load)) == Scratch.namespace
    assert Scratch.namespace in classes and list(classes) == [Scratch.namespace]
    assert loads == [] and not classes.is_loaded(Scratch.namespace)
    assert classes.get(Scratch.namespace) is Scratch
    assert classes.get(Scratch.namespace) is Scratch
    assert loads == [Scratch.namespace] and checked == [Scratch]
    assert classes.get("nope") is None and len(classes) == 1


def test_a_deferred_class_must_declare_its_namespace() -> None:
    """A class whose ``namespace`` is not the one it was registered under is refused at load."""
    classes = ActorClasses(on_load=lambda cls: None)
    classes.add(DeferredActor("other_name", lambda: Scratch))
    with pytest.raises(TypeError, match="other_name"):
        classes.get("other_name")


def test_the_platforms_deferred_objects_are_the_default_objects() -> None:
    """RT-1: ``deferred_objects()`` names DEFAULT_OBJECTS' namespaces in their order, and each
    loads its class."""
    deferred = deferred_objects()
    assert [d.namespace for d in deferred] == [cls.namespace for cls in DEFAULT_OBJECTS]
    assert [d.load() for d in deferred] == list(DEFAULT_OBJECTS)
