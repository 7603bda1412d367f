"""The environment the start figure measures a node in: this package as an installation has it.

The benchmark's own virtual environment is usually the development one: an editable install (a
``.pth`` path entry), setuptools' ``distutils-precedence.pth`` (run by every interpreter start) and
the development tools, one of which (import-linter) brings ``rich``, which structlog imports when it
is there (a terminal's log lines load it; ADR 0022). An installation of the package has none of
them. So the start figure runs its children in a fresh virtual environment (no pip, no ``.pth``
file) whose site-packages holds links to this package and to the distributions it requires at run time
(``Requires-Dist`` without an extra, followed transitively, those installed here), and nothing else.
"""

from __future__ import annotations

import importlib.metadata as md
import re
import venv
from pathlib import Path

__all__ = ["installed_python", "runtime_distributions"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def _key(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def runtime_distributions(root: str = "mailbox-actors") -> list[md.Distribution]:
    """``root`` and every distribution it requires without an extra, transitively, as installed
    here. A requirement whose marker excludes this platform (``uvloop; sys_platform != 'win32'``
    on Windows) is not installed, so it is skipped as the installer skipped it."""
    seen: dict[str, md.Distribution] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        if _key(name) in seen:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            if name == root:
                raise
            continue
        seen[_key(name)] = dist
        for req in dist.requires or []:
            _, _, marker = req.partition(";")
            match = _NAME.match(req)
            if match and "extra" not in marker:
                todo.append(match.group(0))
    return list(seen.values())


def _top_levels(dist: md.Distribution) -> set[str]:
    """The names a distribution put straight into site-packages (packages, modules, dist-info)."""
    if dist.files is None:  # no RECORD: cannot say what it installed
        raise RuntimeError(f"{dist.metadata['Name']} has no RECORD; cannot link it")
    return {f.parts[0] for f in dist.files
            if f.parts and not f.parts[0].startswith("..") and not f.parts[0].endswith(".pth")
            and f.parts[0] != "__pycache__"}


def installed_python(where: Path) -> str:
    """Make the environment at ``where`` (once) and answer its interpreter."""
    python = where / "bin" / "python"
    if python.exists():
        return str(python)
    venv.EnvBuilder(with_pip=False, symlinks=True).create(where)
    site = next((where / "lib").glob("python*/site-packages"))
    package = Path(__file__).resolve().parents[1]  # mailbox_actors/, the package this file is in
    (site / package.name).symlink_to(package)  # the source tree when editable, else as installed
    for dist in runtime_distributions():
        for top in sorted(_top_levels(dist)):
            source, target = Path(str(dist.locate_file(top))), site / top
            if source.exists() and not target.exists():
                target.symlink_to(source)
    return str(python)
