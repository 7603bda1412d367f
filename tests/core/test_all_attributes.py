"""The public API: every name a package or module lists in ``__all__`` exists, and the top-level
package's names are the documented objects."""

from __future__ import annotations

import importlib
import pkgutil

import msgspec
import pytest

import mailbox_actors

MODULES = sorted(m.name for m in pkgutil.walk_packages(mailbox_actors.__path__, "mailbox_actors.")
                 if m.name != "mailbox_actors.__main__")


@pytest.mark.parametrize("name", ["mailbox_actors", *MODULES])
def test_every_name_in_all_exists(name: str) -> None:
    """Each module declares ``__all__``, and it names only things the module really has."""
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ lists {missing}"
    assert len(set(exported)) == len(exported), f"{name}.__all__ repeats a name"


def test_top_level_names_are_the_documented_objects() -> None:
    """``from mailbox_actors import Node, TestRuntime, ...`` gives the same objects as their
    modules."""
    from mailbox_actors.node.node import Node
    from mailbox_actors.testing import TestRuntime

    assert mailbox_actors.Node is Node
    assert mailbox_actors.TestRuntime is TestRuntime
    assert sorted(dir(mailbox_actors)) == sorted(mailbox_actors.__all__)
    with pytest.raises(AttributeError):
        _ = mailbox_actors.NotAThing  # type: ignore[attr-defined]


def test_the_documented_settings_types_are_public() -> None:
    """TK-3 (regression): the types RuntimeSettings' documented struct settings take (limits,
    inbound, dns) are public names, the very classes the settings are declared with, and
    ``TestRuntime(limits=Limits(...))`` takes them."""
    from mailbox_actors import DnsSettings, InboundLimits, Limits, RuntimeSettings

    fields = {f.name: f.type for f in msgspec.structs.fields(RuntimeSettings)}
    assert (fields["limits"], fields["inbound"], fields["dns"]) == (Limits, InboundLimits,
                                                                    DnsSettings)
    settings = RuntimeSettings(data_dir="/tmp/x", limits=Limits(max_database_bytes=1 << 20))
    assert settings.limits.max_database_bytes == 1 << 20
