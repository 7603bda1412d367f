"""Log configuration: JSON lines, request ids, and the refusal of content and addresses (CL-5)."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog

from mailbox_actors.platform.logging import (
    REFUSED,
    bind_request,
    configure_logging,
    get_logger,
    hash_address,
    refuse_content,
)

KEY = b"log-hash-key-for-tests"


class TtyIO(io.StringIO):
    """A StringIO that claims to be a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _reset_structlog() -> Iterator[None]:
    # configure_logging changes process-wide state; leave structlog as other tests expect it.
    yield
    structlog.reset_defaults()
    structlog.contextvars.clear_contextvars()


def _lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def addr(address: str) -> str:
    return "addr:" + hash_address(KEY, address)


# -- hash_address -------------------------------------------------------------------------------


def test_hash_address_is_truncated_hmac_sha256() -> None:
    """An address is logged as HMAC-SHA256(key, address) truncated to 16 hex characters (CL-5)."""
    expected = hmac.new(KEY, b"bob@example.com", hashlib.sha256).hexdigest()[:16]
    assert hash_address(KEY, "bob@example.com") == expected
    assert len(expected) == 16


def test_hash_address_normalises_case_and_whitespace() -> None:
    """Spellings of one address that differ in case or surrounding space hash alike (CL-5)."""
    assert hash_address(KEY, "  Bob@Example.COM\n") == hash_address(KEY, "bob@example.com")


def test_hash_address_depends_on_the_key() -> None:
    """Without the hash key, the hash cannot be recomputed from a guessed address (CL-5)."""
    assert hash_address(KEY, "bob@example.com") != hash_address(b"other", "bob@example.com")
    assert hash_address(KEY, "bob@example.com") != hash_address(KEY, "alice@example.com")


# -- output format ------------------------------------------------------------------------------


def test_json_lines_on_a_non_tty_stream() -> None:
    """Off a terminal each event is one JSON object per line with timestamp, level, event
    (CL-5)."""
    out = io.StringIO()
    configure_logging(stream=out, hash_key=KEY)
    log = get_logger("tests.logging")
    log.info("node_started", port=8787)
    log.warning("slow_alarm", late_ms=12)
    lines = _lines(out)
    assert len(lines) == 2
    first = lines[0]
    assert first["event"] == "node_started"
    assert first["level"] == "info"
    assert first["port"] == 8787
    assert first["logger"] == "tests.logging"
    assert first["timestamp"].endswith("Z")
    assert lines[1]["level"] == "warning"


def test_console_lines_on_a_tty() -> None:
    """On a terminal lines are readable key=value text, not JSON (CL-5)."""
    out = TtyIO()
    configure_logging(stream=out, hash_key=KEY)
    get_logger().info("node_started", port=8787)
    text = out.getvalue()
    assert "node_started" in text
    assert "port" in text
    assert not text.lstrip().startswith("{")


def test_json_flag_overrides_the_tty_check() -> None:
    """json=True forces JSON on a terminal and json=False forces readable lines off one (CL-5)."""
    tty = TtyIO()
    configure_logging(json=True, stream=tty, hash_key=KEY)
    get_logger().info("forced_json")
    assert _lines(tty)[0]["event"] == "forced_json"

    plain = io.StringIO()
    configure_logging(json=False, stream=plain, hash_key=KEY)
    get_logger().info("forced_console")
    assert "forced_console" in plain.getvalue()
    with pytest.raises(json.JSONDecodeError):
        json.loads(plain.getvalue())


def test_level_filters_lower_levels() -> None:
    """Events below the configured level are dropped (CL-5)."""
    out = io.StringIO()
    configure_logging(stream=out, level="warning", hash_key=KEY)
    log = get_logger()
    log.debug("d")
    log.info("i")
    log.warning("w")
    log.error("e")
    assert [line["event"] for line in _lines(out)] == ["w", "e"]


def test_unknown_level_is_refused_with_its_name() -> None:
    """A bad level setting fails at configuration, naming the bad value (CL-4)."""
    with pytest.raises(ValueError, match="'loud'"):
        configure_logging(stream=io.StringIO(), level="loud")


def test_configure_is_idempotent() -> None:
    """Configuring twice with the same settings writes each event once (CL-5)."""
    out = io.StringIO()
    configure_logging(stream=out, hash_key=KEY)
    configure_logging(stream=out, hash_key=KEY)
    get_logger().info("once")
    assert [line["event"] for line in _lines(out)] == ["once"]


def test_reconfigure_reaches_loggers_already_used() -> None:
    """A logger obtained and used before a reconfigure follows the new stream and level (CL-5)."""
    log = get_logger("early")
    first = io.StringIO()
    configure_logging(stream=first, level="debug", hash_key=KEY)
    log.debug("to_first")
    second = io.StringIO()
    configure_logging(stream=second, level="info", hash_key=KEY)
    log.debug("dropped")
    log.info("to_second")
    assert [line["event"] for line in _lines(first)] == ["to_first"]
    assert [line["event"] for line in _lines(second)] == ["to_second"]


# -- request ids --------------------------------------------------------------------------------


def test_bound_request_id_is_on_every_line() -> None:
    """Inside bind_request every line carries the request_id, and after it none does (RT-12)."""
    out = io.StringIO()
    configure_logging(stream=out, hash_key=KEY)
    a, b = get_logger("a"), get_logger("b")
    with bind_request("req_01JTEST"):
        a.info("one")
        b.warning("two")
    a.info("three")
    lines = _lines(out)
    assert [line.get("request_id") for line in lines] == ["req_01JTEST", "req_01JTEST", None]


@pytest.mark.anyio
async def test_request_ids_do_not_leak_between_tasks() -> None:
    """Concurrent tasks each log their own request_id (RT-12)."""
    out = io.StringIO()
    configure_logging(stream=out, hash_key=KEY)
    log = get_logger()
    step = anyio.Event()

    async def handle(rid: str, first: bool) -> None:
        with bind_request(rid):
            if first:
                await step.wait()  # interleave: this task logs after the other bound its id
            else:
                step.set()
            log.info("handled", rid=rid)

    async with anyio.create_task_group() as tg:
        tg.start_soon(handle, "req_A", True)
        tg.start_soon(handle, "req_B", False)
    lines = _lines(out)
    assert len(lines) == 2
    assert all(line["request_id"] == line["rid"] for line in lines)


# -- refusing content ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "key",
    ["body", "text", "html", "subject", "content", "attachment", "attachments", "raw", "headers",
     "Subject", "BODY", "Headers"],
)
def test_content_keys_are_refused(key: str) -> None:
    """Values under content keys never reach the log, whatever their case (CL-5)."""
    out = io.StringIO()
    configure_logging(stream=out, hash_key=KEY)
    get_logger().info("ingested", **{key: "Dear Bob, the launch code is 0000"})
    assert _lines(out)[0][key] == REFUSED
    assert "launch code" not in out.getvalue()


def test_nested_content_keys_are_refused() -> None:
    """Content keys inside nested dicts and lists are refused too (CL-5)."""
    out = io.StringIO()
    configure_logging(stream=out, hash_key=KEY)
    msg = {"id": "eml_1", "Subject": "secret plans", "parts": [{"html": "<b>secret</b>"}]}
    get_logger().info("stored", message=msg)
    assert _lines(out)[0]["message"] == {
        "id": "eml_1",
        "Subject": REFUSED,
        "parts": [{"html": REFUSED}],
    }
    assert "secret" not in out.getvalue()


def test_addresses_are_hashed_everywhere() -> None:
    """Addresses in the event, in values and in nested dicts and lists leave only as hashes
    (CL-5)."""
    out = io.StringIO()
    configure_logging(stream=out, hash_key=KEY)
    get_logger().info(
        "delivering to Bob@Example.com",
        to="alice@example.org",
        rcpts=["carol@example.net", "Dan <dan@example.net>"],
        route={"from": "eve@example.com", "hops": [("mx", "mallory@example.com")]},
        note="cc: x.y+tag@sub.example.co.uk; reply to trent@example.com.",
    )
    text = out.getvalue()
    assert "example" not in text
    line = _lines(out)[0]
    assert line["event"] == f"delivering to {addr('bob@example.com')}"
    assert line["to"] == addr("alice@example.org")
    assert line["rcpts"] == [addr("carol@example.net"), f"Dan <{addr('dan@example.net')}>"]
    assert line["route"] == {"from": addr("eve@example.com"),
                             "hops": [["mx", addr("mallory@example.com")]]}
    assert line["note"] == (
        f"cc: {addr('x.y+tag@sub.example.co.uk')}; reply to {addr('trent@example.com')}."
    )


@pytest.mark.parametrize(
    "address",
    ['"john doe"@example.com', "user@localhost", "root@[192.0.2.1]", "jörg@bücher.de",
     "o'brien@example.ie"],
)
def test_unusual_addresses_are_hashed(address: str) -> None:
    """Quoted, dotless, IP-literal and internationalised addresses are hashed too (CL-5)."""
    out = io.StringIO()
    configure_logging(stream=out, hash_key=KEY)
    get_logger().info("rcpt", rcpt=address)
    assert _lines(out)[0]["rcpt"] == addr(address)


def test_exception_messages_are_not_logged() -> None:
    """A logged traceback has the frames and the exception's type, never its text: a handler's
    exception may quote an address or a subject (CL-5, the privacy rule)."""
    out = io.StringIO()
    configure_logging(stream=out, hash_key=KEY)
    rcpt, subject = "bob@example.com", "Quarterly secret plans"
    try:
        raise ValueError(f"mailbox full for {rcpt}: {subject!r}")  # the frame shows this line only
    except ValueError:
        get_logger().exception("delivery_failed")
    line = _lines(out)[0]
    assert "bob@example.com" not in out.getvalue() and "secret plans" not in out.getvalue()
    assert addr("bob@example.com") not in out.getvalue()
    assert "test_logging.py" in line["exception"] and "ValueError" in line["exception"]
    assert line["level"] == "error"


def test_console_output_is_scrubbed_too() -> None:
    """Readable terminal lines get the same refusal as JSON lines (CL-5)."""
    out = TtyIO()
    configure_logging(stream=out, hash_key=KEY)
    get_logger().info("to bob@example.com", subject="hello there")
    text = out.getvalue()
    assert "bob@example.com" not in text
    assert "hello there" not in text
    assert addr("bob@example.com") in text


def test_bytes_and_objects_do_not_leak() -> None:
    """Raw bytes are refused and other objects are logged as scrubbed text (CL-5)."""

    class Rcpt:
        def __str__(self) -> str:
            return "Rcpt(bob@example.com)"

    out = io.StringIO()
    configure_logging(stream=out, hash_key=KEY)
    get_logger().info("raw", blob=b"From: bob@example.com", who=Rcpt(), n=3, ok=True, x=None)
    line = _lines(out)[0]
    assert line["blob"] == REFUSED
    assert line["who"] == f"Rcpt({addr('bob@example.com')})"
    assert (line["n"], line["ok"], line["x"]) == (3, True, None)
    assert "bob@example.com" not in out.getvalue()


def test_address_used_as_a_key_is_hashed() -> None:
    """An address used as a key name is hashed like any other (CL-5)."""
    out = io.StringIO()
    configure_logging(stream=out, hash_key=KEY)
    get_logger().info("per_rcpt", **{"bob@example.com": "queued"}, m={"eve@example.com": 1})
    line = _lines(out)[0]
    assert line[addr("bob@example.com")] == "queued"
    assert line["m"] == {addr("eve@example.com"): 1}


def test_deeply_nested_values_are_refused() -> None:
    """Values nested past the depth limit are refused rather than walked (CL-5)."""
    deep: list[Any] = ["bob@example.com"]
    for _ in range(20):
        deep = [deep]
    event = refuse_content(None, "info", {"event": "e", "deep": deep})
    assert "bob@example.com" not in json.dumps(event)
    assert REFUSED in json.dumps(event)


def test_refuse_content_as_a_plain_processor() -> None:
    """refuse_content works on an event dict on its own, with or without a configured key
    (CL-5)."""
    configure_logging(stream=io.StringIO(), hash_key=KEY)
    event = refuse_content(None, "info", {"event": "hi a@b.example", "body": "x", "n": 1})
    assert event == {"event": f"hi {addr('a@b.example')}", "body": REFUSED, "n": 1}


def test_text_without_addresses_is_untouched() -> None:
    """Strings with an ``@`` that is not part of an address, and ordinary text, pass unchanged."""
    configure_logging(stream=io.StringIO(), hash_key=KEY)
    event = refuse_content(None, "info", {"event": "retry @ 2s", "path": "/rpc/ns/abc"})
    assert event == {"event": "retry @ 2s", "path": "/rpc/ns/abc"}


def test_an_embedding_program_gets_library_logs_on_stderr_with_standard_keys(
        tmp_path: Path) -> None:
    """OPS-11: a program that uses the runtime without configuring logging gets nothing from the
    library on standard output; its log lines are JSON on standard error (not a terminal here)
    with structlog's standard keys: timestamp, level, event."""
    program = (
        "import anyio\n"
        "from mailbox_actors.testing import TestRuntime\n"
        "from mailbox_actors.platform.control.database import ControlDb\n"
        "async def main():\n"
        f"    async with TestRuntime({str(tmp_path / 'rt')!r}) as rt:\n"
        "        pass\n"
        "anyio.run(main)\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    assert lines, done.stderr
    assert all({"timestamp", "level", "event"} <= set(line) for line in lines)
    started = next(line for line in lines if line["event"] == "node_started")
    assert started["level"] == "info"


def test_a_structlog_configuration_gets_the_runtime_lines() -> None:
    """OPS-11: a program that configures structlog itself gets the runtime's lines through its own
    chain, with the request id and bound keys; a later configure_logging takes them back."""
    out = io.StringIO()
    configure_logging(stream=out, hash_key=KEY)
    with structlog.testing.capture_logs() as captured, bind_request("req_01JOWN"):
        get_logger("tests.own").warning("through_theirs", n=1)
    assert [(e["event"], e["log_level"], e["request_id"], e["n"]) for e in captured] == [
        ("through_theirs", "warning", "req_01JOWN", 1)]
    assert out.getvalue() == ""
    configure_logging(stream=out, hash_key=KEY)
    get_logger().info("ours_again")
    assert [line["event"] for line in _lines(out)] == ["ours_again"]


def test_json_lines_need_no_logging_library(tmp_path: Path) -> None:
    """Issue 28 item 3: JSON lines (off a terminal) are written without importing structlog or
    anything its console renderer brings (rich, pygments, colorama)."""
    program = (
        "import sys\n"
        "from mailbox_actors.platform.logging import get_logger\n"
        "get_logger('t').info('hello', to='bob@example.com')\n"
        "loaded = [m for m in ('structlog', 'rich', 'pygments', 'colorama') if m in sys.modules]\n"
        "print(loaded)\n")
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    line = json.loads(done.stderr)
    assert line["event"] == "hello" and line["logger"] == "t"
    assert "bob@example.com" not in done.stderr
