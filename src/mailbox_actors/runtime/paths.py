"""Where an actor's file is (RT-1, RT-2): ``actors/<namespace>/<2 hex>/<id>.sqlite``, built only
for an id of that namespace.

An id is checked once (its HMAC under the namespace's key) and remembered in a bounded set that
the router shares (``verified``): a call checked at the door does not pay the digest again when
its actor is opened. An id the node recorded itself (an alarm's key: its alarm index, or a scan
of its own actor files; never a client's) is checked for its form alone (``own``): 64 lowercase
hex digits, nothing a path could escape by.
"""

from __future__ import annotations

import os
from pathlib import Path

from mailbox_actors.core.actor_ids import check_id, has_id_form
from mailbox_actors.wire.errors import ErrorCode, MailboxActorsError

__all__ = ["VERIFIED_MAX", "ActorPaths"]

VERIFIED_MAX = 10_000  # ids remembered per namespace (cleared when full: an id never changes)
# pathlib's constructor of a child from a plain name (what ``iterdir`` uses), where it has one:
# ``directory / name`` parses the name again, three quarters of a path's cost at every open.
_CHILD = getattr(Path, "_make_child_relpath", None)


class ActorPaths:
    """The namespaces' keys, their checked ids and their directories under ``actors_dir``."""

    __slots__ = ("_dirs", "_files", "actors_dir", "keys", "verified")
    _dirs: dict[tuple[str, str], Path]
    _files: dict[tuple[str, str], str]

    def __init__(self, actors_dir: Path) -> None:
        self.actors_dir = actors_dir
        self.keys: dict[str, bytes] = {}
        self.verified: dict[str, set[str]] = {}
        # (namespace, the id's first two digits) -> that directory: a path is one join from it
        # (pathlib's parsing of the whole path again was a third of opening's Python work)
        self._dirs = {}
        self._files = {}  # the same directories, as absolute path texts ending in a separator

    def add(self, namespace: str, key: bytes) -> None:
        self.keys[namespace] = key
        self.verified[namespace] = set()

    def check(self, namespace: str, object_id: str) -> None:
        """Raise ``invalid_request`` unless ``object_id`` is an id of ``namespace``."""
        verified = self.verified[namespace]
        if isinstance(object_id, str) and object_id in verified:
            return
        reason = check_id(self.keys[namespace], object_id)
        if reason is not None:
            raise MailboxActorsError(ErrorCode.INVALID_REQUEST, reason)
        if len(verified) >= VERIFIED_MAX:
            verified.clear()
        verified.add(object_id)

    def check_own(self, object_id: str) -> None:
        """Raise ``invalid_request`` unless ``object_id`` has an id's form: for an id the node
        recorded itself (an alarm's key), whose HMAC was checked when the actor first wrote its
        alarm; an index or a file name altered since may name another file of the data dir,
        never one outside it (a burst paid the HMAC once an alarm: the verified set holds
        ``VERIFIED_MAX`` ids)."""
        if not has_id_form(object_id):
            raise MailboxActorsError(ErrorCode.INVALID_REQUEST,
                                     "object id must be 64 lowercase hex digits")

    def path_for(self, namespace: str, object_id: str, own: bool = False) -> Path:
        # Only a checked id makes a path: 64 lowercase hex digits, nothing a path could escape by.
        if own:
            self.check_own(object_id)
        else:
            self.check(namespace, object_id)
        at = (namespace, object_id[:2])
        directory = self._dirs.get(at)
        if directory is None:  # at most 256 per namespace
            directory = self._dirs[at] = self.actors_dir / namespace / object_id[:2]
        name = f"{object_id}.sqlite"
        return directory / name if _CHILD is None else _CHILD(directory, name)

    def file_for(self, namespace: str, object_id: str, own: bool = False) -> str:
        """``path_for`` as an absolute path text, the form the actor's file is opened by: no
        pathlib object made and formatted again at every activation (an open's path was about
        a tenth of its Python work). ``own``: the node recorded the id itself (``check_own``)."""
        if own:
            self.check_own(object_id)
        else:
            self.check(namespace, object_id)
        at = (namespace, object_id[:2])
        directory = self._files.get(at)
        if directory is None:  # at most 256 per namespace
            directory = self._files[at] = os.path.join(
                os.path.abspath(self.actors_dir), namespace, object_id[:2], "")
        return f"{directory}{object_id}.sqlite"
