"""Runtime logs into pytest's log capture (TK-4).

The runtime writes its log lines straight to a stream (never through the stdlib ``logging``
module: that is its fast path). In a test that stream is this one: each JSON line becomes a record
of the stdlib logger ``mailbox_actors`` at the line's level, which pytest's ``caplog`` and its
"Captured log" section show, so nothing of the runtime reaches the test's stdout or stderr.
"""

from __future__ import annotations

import logging

import msgspec

from mailbox_actors.platform.logging import LEVELS, configure_logging

__all__ = ["LOGGER_NAME", "LogCaptureStream", "capture_runtime_logs"]

LOGGER_NAME = "mailbox_actors"


class LogCaptureStream:
    """A text stream whose lines become stdlib log records (``logger`` at the line's level)."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._logger = logger or logging.getLogger(LOGGER_NAME)
        self._pending = ""

    def write(self, text: str) -> int:
        self._pending += text
        *lines, self._pending = self._pending.split("\n")
        for line in lines:
            if line:
                self._emit(line)
        return len(text)

    def _emit(self, line: str) -> None:
        level = logging.INFO
        try:
            doc = msgspec.json.decode(line)
        except msgspec.DecodeError:
            doc = None
        if isinstance(doc, dict):
            level = LEVELS.get(str(doc.get("level", "info")).lower(), logging.INFO)
        self._logger.log(level, "%s", line)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def capture_runtime_logs(level: str = "debug") -> LogCaptureStream:
    """Send every runtime log line of this process to the ``mailbox_actors`` stdlib logger."""
    stream = LogCaptureStream()
    configure_logging(json=True, level=level, stream=stream)  # type: ignore[arg-type]
    return stream
