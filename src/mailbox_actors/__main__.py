"""``python -m mailbox_actors``: the command line."""

import sys

from mailbox_actors.cli import main

sys.exit(main())
