"""The public names (TK-3): what a user imports from ``mailbox_actors`` has its real type under
mypy --strict, and the host-service client imports without the runtime or sqlite3."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

USER_MODULE = '''
"""A user's own actor and its test, as a user writes them."""

from __future__ import annotations

from typing import Any

import msgspec

from mailbox_actors import Actor, ActorContext, Client, Migration, TestRuntime
from mailbox_actors.runtime.actor import Call
from mailbox_actors.platform.storage.sql import SqlStorage


class Init(msgspec.Struct, tag="init", tag_field="op"):
    start: int = 0


class Incr(msgspec.Struct, tag="incr", tag_field="op"):
    by: int = 1


CounterRequest = Init | Incr


class Counter(Actor[CounterRequest]):
    namespace = "counter"
    requests = CounterRequest
    init_request = Init
    migrations = (Migration(1, ("CREATE TABLE c (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)",)),)

    def __init__(self, ctx: ActorContext) -> None:
        super().__init__(ctx)
        self.seen = 0

    async def handle(self, call: Call, req: CounterRequest) -> Any:
        match req:
            case Init():
                return self.sql.transaction_sync(lambda tx: self._init(tx, call, req.start))
            case Incr():
                return self.sql.transaction_sync(lambda tx: self._incr(tx, req.by))

    def _init(self, tx: SqlStorage, call: Call, start: int) -> dict[str, bool]:
        created = self.ctx.claim_owner(call)
        tx.exec("INSERT OR IGNORE INTO c (id, n) VALUES (1, ?)", start)
        self.ctx.schedule("flush", self.ctx.now_ms() + 1_000)
        return {"created": created}

    def _incr(self, tx: SqlStorage, by: int) -> dict[str, int]:
        tx.exec("UPDATE c SET n = n + ? WHERE id = 1", by)
        self.seen += 1
        return {"n": int(tx.exec("SELECT n FROM c WHERE id = 1").one()[0])}


class Plain(Actor):
    """A bare Actor handles Any (the README's style) and still type-checks."""

    namespace = "plain"
    requests = Init
    init_request = Init

    async def handle(self, call: Call, req: Any) -> Any:
        return None


async def test_counter() -> None:
    async with TestRuntime(objects=(Counter,)) as rt:
        oid: str = rt.id_from_name("counter", "visits")
        await rt.call("counter", oid, Init(start=10), tenant_id="acme")
        reply = await rt.call("counter", oid, Incr(by=2), tenant_id="acme")
        assert reply == {"n": 12}
        await rt.advance(1_000)
        now: int = rt.now_ms()
        assert now > 0


def make_client() -> Client:
    return Client("http://127.0.0.1:1", token="host-service-token")
'''

BROKEN = '''
from typing import Any

from mailbox_actors import Actor, TestRuntime
from mailbox_actors.runtime.actor import Call


class Wrong(Actor[int]):
    namespace = "wrong"

    async def handle(self, call: Call, req: str) -> Any:
        return None


async def misuse() -> None:
    async with TestRuntime() as rt:
        await rt.advance("soon")
'''


def mypy_strict(tmp_path: Path, source: str) -> subprocess.CompletedProcess[str]:
    module = tmp_path / "user_module.py"
    module.write_text(textwrap.dedent(source))
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir",
         str(tmp_path / ".mypy_cache"), str(module)],
        capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False)


def test_a_user_actor_and_its_test_pass_mypy_strict(tmp_path: Path) -> None:
    """TK-3: a user module with an Actor[Req] subclass, a bare Actor subclass and a test using
    TestRuntime, all imported from ``mailbox_actors``, passes mypy --strict."""
    done = mypy_strict(tmp_path, USER_MODULE)
    assert done.returncode == 0, done.stdout + done.stderr


def test_mypy_strict_sees_real_types_behind_the_public_names(tmp_path: Path) -> None:
    """TK-3: the public names are not Any to mypy: a handle whose request type does not match the
    actor's union, and a TestRuntime method called with the wrong type, are both errors."""
    done = mypy_strict(tmp_path, BROKEN)
    assert done.returncode == 1, done.stdout + done.stderr
    assert 'Argument 2 of "handle" is incompatible with supertype' in done.stdout
    assert 'Argument 1 to "advance" of "TestRuntime" has incompatible type "str"' in done.stdout


def test_the_host_service_client_imports_without_the_runtime_or_sqlite3() -> None:
    """TK-3, OPS: ``from mailbox_actors import Client`` (and ``mailbox_actors.rpc``) loads neither
    the runtime, nor actor storage, nor sqlite3: a host service needs only the client."""
    probe = ("import sys\n"
             "from mailbox_actors import Client\n"
             "import mailbox_actors.rpc\n"
             "heavy = sorted(m for m in sys.modules if m in ('sqlite3', 'aiosqlite') or "
             "m.startswith(('mailbox_actors.runtime', 'mailbox_actors.platform.storage', "
             "'mailbox_actors.node', 'mailbox_actors.testing')))\n"
             "print(Client.__name__, heavy)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "Client []"


def test_the_object_facing_context_and_storage_show_nothing_of_the_host() -> None:
    """TK-3, RT-4, RT-14: what an actor's code is given names only the object API (README 'Writing
    an actor'): ActorContext has no host, queue, gate or activation state, and SqlStorage no
    runtime-only statement, stored-alarm, output-gate or closing name; a subclass of Actor gets
    exactly those two as ``self.ctx`` and ``self.sql``."""
    from mailbox_actors.platform.storage.sql import SqlStorage
    from mailbox_actors.runtime.context import ActorContext

    context_names = {n for n in dir(ActorContext) if not n.startswith("_")}
    assert context_names == {
        "abort", "block_concurrency_while", "call", "cancel", "claim_owner", "clock", "deadline_ms",
        "emit",
        "erased", "id", "id_from_name", "log", "mark_erased", "namespace", "new_id", "now_ms",
        "owner_identity", "owner_tenant", "rng", "schedule", "schema_version", "scheduled",
        "service", "settings", "storage", "tenant_events_days", "transaction"}
    storage_names = {n for n in dir(SqlStorage) if not n.startswith("_")}
    assert storage_names >= {"exec", "transaction_sync", "get_alarm", "set_alarm", "delete_alarm",
                             "database_size", "now_ms", "in_transaction", "flush", "delete_all"}
    assert storage_names.isdisjoint({"sys_exec", "stored_alarm", "check_writes", "alarm_hidden",
                                     "alarm_set_in_handler", "before_transaction", "alarm_sink",
                                     "close", "host"})


def _module_imports(path: Path, src: Path) -> set[str]:
    """The project modules ``path`` imports at its top level or under ``TYPE_CHECKING`` (an
    import inside a function is a deliberate late import and does not count)."""
    import ast

    tree = ast.parse(path.read_text())
    body = list(tree.body)
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            body += node.body
    found: set[str] = set()
    for node in body:
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m.startswith("mailbox_actors.")}


# Circles that are being taken apart this round (issue 27); a circle that goes must leave this list
# (the test fails on a stale entry), and none may be added.
KNOWN_CIRCLES: set[str] = set()


def test_no_import_circle_between_the_modules_of_one_package() -> None:
    """STYLE (a concept whole in one module; collaborators passed in): no two sibling modules of a
    package import each other, directly or round a longer circle, TYPE_CHECKING imports included."""
    src = Path(__file__).resolve().parents[2] / "src" / "mailbox_actors"
    modules = {}
    for p in src.rglob("*.py"):
        rel = p.relative_to(src.parent).with_suffix("")
        name = ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
        modules[name] = p
    assert len(modules) > 100  # the walk found the tree
    graph = {}
    for name, p in modules.items():
        package = name.rsplit(".", 1)[0] if p.name != "__init__.py" else name
        graph[name] = {m for m in _module_imports(p, src) if m in modules and m != name
                       and m.rsplit(".", 1)[0] == package and not m.endswith("__init__")
                       and modules[m].name != "__init__.py"}
    circles = []
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                circles.append([*trail[trail.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    found = {" -> ".join(c[:-1]) for c in circles}
    assert found - KNOWN_CIRCLES == set(), "new import circles"
    assert KNOWN_CIRCLES - found == set(), "circles gone: take them off KNOWN_CIRCLES"
