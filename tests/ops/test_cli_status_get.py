"""``status``'s one-shot GET (``cli.status.get``): HTTP/1.1 on a blocking socket, framed by
httptools as the pooled client's answers are; what it does with an answer sent in chunks, one cut
short, one malformed, a node that never answers, and a URL that is not a node's; and ``status``
over a cluster one of whose nodes is unreachable."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from mailbox_actors.cli.status import get
from mailbox_actors.platform.locks import DataDirLock


@pytest.fixture
def server() -> Iterator[tuple[str, list[bytes], list[bytes]]]:
    """A loopback server answering each connection with the next reply in ``replies`` (bytes
    sent as given, then the connection closed; ``b""``: never answers until the test ends); what
    each connection sent lands in ``requests``."""
    replies: list[bytes] = []
    requests: list[bytes] = []
    done = threading.Event()
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            if done.is_set():
                conn.close()
                return
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    head += chunk
                requests.append(head)
                reply = replies.pop(0)
                if reply:
                    conn.sendall(reply)
                else:
                    done.wait()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}", replies, requests
    finally:
        done.set()
        socket.create_connection(listener.getsockname()).close()  # wakes its accept
        thread.join(timeout=10)
        listener.close()


def test_an_answer_with_a_length_and_the_request_sent(
        server: tuple[str, list[bytes], list[bytes]]) -> None:
    """CL-3: a framed answer is read to its length (bytes after it are not), and the request
    is one GET with its host, the headers given and no body."""
    url, replies, requests = server
    replies.append(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 12\r\n"
                   b"\r\n{\"ok\": true}extra")
    assert get(url, "/admin/status", {"authorization": "Bearer t"}, 10.0) == (200, b'{"ok": true}')
    port = url.rsplit(":", 1)[1]
    assert requests == [f"GET /admin/status HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n"
                        "authorization: Bearer t\r\ncontent-length: 0\r\n\r\n".encode()]


def test_an_answer_in_chunks_and_an_error_status(
        server: tuple[str, list[bytes], list[bytes]]) -> None:
    """CL-3: an answer sent in chunks is joined; an error status is answered as it came."""
    url, replies, _ = server
    replies.append(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
                   b"3\r\nabc\r\n4\r\ndefg\r\n0\r\n\r\n")
    replies.append(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n")
    assert get(url, "/", {}, 10.0) == (200, b"abcdefg")
    assert get(url, "/", {}, 10.0) == (401, b"")


@pytest.mark.parametrize("reply", [
    b"HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort",  # closed before the whole body
    b"not HTTP at all\r\n\r\n",
])
def test_an_answer_cut_short_or_malformed_is_a_connection_error(
        server: tuple[str, list[bytes], list[bytes]], reply: bytes) -> None:
    """CL-3: an answer cut short or not HTTP is a ConnectionError (the node's row: unreachable)."""
    url, replies, _ = server
    replies.append(reply)
    with pytest.raises(ConnectionError):
        get(url, "/", {}, 10.0)


def test_a_node_that_never_answers_is_a_timeout(
        server: tuple[str, list[bytes], list[bytes]]) -> None:
    """CL-3: a node that takes the connection and never answers is a TimeoutError in time."""
    url, replies, _ = server
    replies.append(b"")
    with pytest.raises(TimeoutError):
        get(url, "/", {}, 0.2)


def test_nothing_listening_is_an_os_error() -> None:
    """CL-3: a refused connection is an OSError (the node's row: unreachable)."""
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    with pytest.raises(OSError):
        get(f"http://127.0.0.1:{port}", "/", {}, 10.0)


@pytest.mark.parametrize("url", ["ftp://127.0.0.1:1", "http://127.0.0.1:1/path", "127.0.0.1:1",
                                 "http://127.0.0.1:port"])
def test_a_url_that_is_not_a_nodes_is_refused(url: str) -> None:
    """CL-3: a URL that is not http(s)://host[:port] is refused before any connection."""
    with pytest.raises(ValueError):
        get(url, "/", {}, 10.0)


def test_a_header_that_would_split_the_request_is_refused() -> None:
    """CL-3: a header value holding CR or LF is refused (no header injection)."""
    with pytest.raises(ValueError):
        get("http://127.0.0.1:1", "/", {"authorization": "Bearer t\r\nx: y"}, 10.0)



def _status_json(data: Path) -> subprocess.CompletedProcess[str]:
    """``status --json`` on ``data`` in a process of its own, the directory held as a supervisor
    holds it."""
    lock = DataDirLock(data)
    lock.acquire()
    try:
        return subprocess.run(
            [sys.executable, "-m", "mailbox_actors", "status", "--data", str(data), "--json"],
            capture_output=True, text=True, timeout=60,
            env=os.environ | {"MAILBOX_ACTORS_OPERATOR_TOKEN": "op"})
    finally:
        lock.release()

def test_status_lists_each_node_of_the_cluster_and_says_which_is_unreachable(
        tmp_path: Path, server: tuple[str, list[bytes], list[bytes]]) -> None:
    """CL-3: ``status`` asks every node cluster.json lists, in turn: one that answers is its
    row, one that refuses the connection is "unreachable", and the exit status is then 1."""
    url, replies, requests = server
    body = json.dumps({"status": "ok", "pid": 4242, "actors_active": 3, "alarms_pending": 2,
                       "queues": {"webhooks": {"ready": 1}}}).encode()
    replies.append(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
                   b"\r\n%s" % (len(body), body))
    with socket.create_server(("127.0.0.1", 0)) as s:
        refused = f"http://127.0.0.1:{s.getsockname()[1]}"
    (tmp_path / "cluster.json").write_text(json.dumps({"nodes": [
        {"name": "node-0", "url": url, "restarts": 2}, {"name": "node-1", "url": refused}]}))
    done = _status_json(tmp_path)
    assert done.returncode == 1, done.stderr
    doc = json.loads(done.stdout)
    assert [(n["name"], n["status"], n["restarts"]) for n in doc["nodes"]] == [
        ("node-0", "ok", 2), ("node-1", "unreachable", 0)]
    assert doc["nodes"][0]["pid"] == 4242 and doc["queues"] == {"webhooks": {"ready": 1}}
    assert b"authorization: Bearer op\r\n" in requests[0]


def test_status_says_which_node_answered_badly(
        tmp_path: Path, server: tuple[str, list[bytes], list[bytes]]) -> None:
    """CL-3: a node address answering 200 with something other than a JSON object (another
    service on the port) is that node's row, "bad answer", and one answering an error status is
    "HTTP <status>"; the other rows are printed and the exit status is 1."""
    url, replies, _ = server
    replies.append(b"HTTP/1.1 200 OK\r\ncontent-length: 6\r\n\r\n<html>")
    replies.append(b"HTTP/1.1 401 Unauthorized\r\ncontent-length: 0\r\n\r\n")
    (tmp_path / "cluster.json").write_text(json.dumps({"nodes": [
        {"name": "node-0", "url": url}, {"name": "node-1", "url": url}]}))
    done = _status_json(tmp_path)
    assert done.returncode == 1, done.stderr
    assert [n["status"] for n in json.loads(done.stdout)["nodes"]] == ["bad answer", "HTTP 401"]
