"""SQLite files several node processes share (the control database, the queue file): one class
opens, checks, migrates and runs statements on each (``shared_file``)."""

__all__: list[str] = []
