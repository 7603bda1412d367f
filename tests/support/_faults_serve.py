"""``python tests/support/_faults_serve.py serve ARGS...``: the ``mailbox-actors`` command line with
the fault test's actor (``faults_actor.FaultList``) served beside the platform's objects.

Only until ``serve --objects`` can load a user's class (UI-7): the node takes its objects from
``mailbox_actors.objects.DEFAULT_OBJECTS`` when it is built, so the class is added there first.
"""

from __future__ import annotations

import sys

import mailbox_actors.objects as objects
from faults_actor import FaultList
from mailbox_actors.cli import main

objects.DEFAULT_OBJECTS = (*objects.DEFAULT_OBJECTS, FaultList)  # type: ignore[misc]

if __name__ == "__main__":
    sys.exit(main())
