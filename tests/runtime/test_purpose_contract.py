"""The contract CLEARED_WITHOUT_AWAIT (AL-2, CA-1): no await between a purpose method's return and
the clearing of its purpose in ``runtime.purposes.run_due``; Carrier's dispatch wake relies on it."""

from __future__ import annotations

import ast
import inspect
import textwrap

from mailbox_actors.runtime import purposes


def _calls_purpose_method(node: ast.AST) -> bool:
    return any(isinstance(n, ast.Await) and isinstance(n.value, ast.Call)
               and isinstance(n.value.func, ast.Call)
               and getattr(n.value.func.func, "id", None) == "getattr" for n in ast.walk(node))


def _window(source: str) -> list[ast.stmt]:
    """The statements of ``run_due``'s loop after the one that awaits the purpose method."""
    fn = ast.parse(textwrap.dedent(source)).body[0]
    loops = [n for n in ast.walk(fn) if isinstance(n, ast.For)]
    assert len(loops) == 1, "run_due runs its purposes in one loop"
    body = loops[0].body
    at = next(i for i, stmt in enumerate(body) if _calls_purpose_method(stmt))
    return body[at + 1:]


def _awaits(stmts: list[ast.stmt]) -> list[int]:
    return [n.lineno for s in stmts for n in ast.walk(s)
            if isinstance(n, ast.Await | ast.AsyncFor | ast.AsyncWith)]


def test_no_await_between_a_purpose_method_and_its_clearing() -> None:
    """CA-1, AL-2: run_due clears the purpose with no await after the purpose method returned."""
    window = _window(inspect.getsource(purposes.run_due))
    assert window, "the clearing follows the method's call in the loop"
    assert any("transaction_sync" in ast.dump(s) for s in window)
    assert _awaits(window) == [], "CLEARED_WITHOUT_AWAIT broken: carrier/wake.py relies on it"
    assert "CLEARED_WITHOUT_AWAIT" in purposes.__all__


def test_the_check_sees_an_await_added_to_the_window() -> None:
    """The check itself: the same loop with an await after the method is caught."""
    broken = textwrap.dedent('''
        async def run_due(actor, due, sql, clear):
            for purpose in due:
                await getattr(actor, purpose)()
                await something()
                sql.transaction_sync(clear)
    ''')
    assert _awaits(_window(broken)) != []
