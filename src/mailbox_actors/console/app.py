"""The web console's pages and actions (UI-4): a Starlette application rendering Jinja2 templates
on the server, with one small script of its own (``static/console.js``) that refreshes a page when
the event index moves.

Every page needs a session opened with the operator token; every action is a POST carrying the
session's CSRF token; every parameter is checked and refused with the project's error codes.
Without dev mode no page shows a body, a subject, a header's value or an address (CA-10); in dev
mode (loopback only) a message's HTML is shown in a sandboxed frame under its own
Content-Security-Policy that allows no script and no remote load.
"""

from __future__ import annotations

import base64
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import jinja2
import markupsafe
import msgspec
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.requests import Request
from starlette.responses import (
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
    StreamingResponse,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from mailbox_actors.console.cluster_view import ClusterView, check_id, ms_ago
from mailbox_actors.console.session import COOKIE, CSRF_FIELD, Sessions
from mailbox_actors.console.settings import ConsoleSettings
from mailbox_actors.wire.carrier import ResolveEmail
from mailbox_actors.wire.control import Identity, Tenant
from mailbox_actors.wire.errors import ErrorCode, InvalidRequest, MailboxActorsError, UnknownPath

__all__ = ["PAGE_CSP", "create_app"]

HERE = Path(__file__).resolve().parent

# The console's own pages: its script and stylesheet only, frames only from itself.
PAGE_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            "connect-src 'self'; frame-src 'self'; form-action 'self'; frame-ancestors 'none'; "
            "base-uri 'none'")
# A message's HTML: no script, no remote load of any kind, no form, no plugin; the styles the
# mail carries inline and images it embeds as data: URLs only. ``sandbox`` also in the header, so
# the body is sandboxed even when opened outside its frame.
MAIL_CSP = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:; "
            "form-action 'none'; frame-ancestors 'self'; base-uri 'none'; sandbox")
_OPEN = frozenset({"/login", "/healthz"})


def create_app(settings: ConsoleSettings, view: ClusterView, sessions: Sessions) -> Starlette:
    """The console's ASGI application; ``view`` is entered and left with the application."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    env.filters["ago"] = lambda ms: ms_ago(view.now_ms(), ms)
    env.filters["utc"] = lambda ms: "-" if ms is None else time.strftime(
        "%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))
    env.filters["short"] = lambda s: s if not isinstance(s, str) or len(s) <= 16 else s[:12] + "…"
    env.filters["bytes"] = _size
    env.filters["cell"] = _cell
    pages = _Pages(settings, view, sessions, env)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with view:
            yield

    routes = [
        Route("/login", pages.login, methods=["GET", "POST"]),
        Route("/logout", pages.logout, methods=["POST"]),
        Route("/healthz", pages.healthz),
        Route("/", pages.overview),
        Route("/actors", pages.actors),
        Route("/actors/{namespace}", pages.namespace),
        Route("/actors/{namespace}/{object_id}", pages.actor),
        Route("/actors/{namespace}/{object_id}/rows/{table}", pages.rows),
        Route("/actors/{namespace}/{object_id}/post-retry", pages.actor_post_retry,
              methods=["POST"]),
        Route("/identities/{identity_id}", pages.identity),
        Route("/identities/{identity_id}/messages/{message_id}", pages.message),
        Route("/identities/{identity_id}/messages/{message_id}/body", pages.message_body),
        Route("/identities/{identity_id}/messages/{message_id}/raw", pages.message_raw),
        Route("/identities/{identity_id}/messages/{message_id}/attachments/{part:int}",
              pages.attachment),
        Route("/identities/{identity_id}/threads/{thread_id}", pages.thread),
        Route("/identities/{identity_id}/resolve", pages.resolve, methods=["POST"]),
        Route("/identities/{identity_id}/post-retry", pages.post_retry, methods=["POST"]),
        Route("/queues", pages.queues),
        Route("/queues/{queue}/redrive", pages.redrive, methods=["POST"]),
        Route("/domains", pages.domains),
        Route("/domains/{domain_id}", pages.domain),
        Route("/domains/{domain_id}/check", pages.check_domain, methods=["POST"]),
        Route("/api/cursor", pages.api_cursor),
        Mount("/static", app=StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(routes=routes, lifespan=lifespan,
                     middleware=[Middleware(_Guard, sessions=sessions)],
                     exception_handlers={MailboxActorsError: pages.error,
                                         404: pages.not_found, 405: pages.not_allowed})


class _Guard(BaseHTTPMiddleware):
    """Session required (except to sign in), CSRF token and same origin on every POST, and the
    security headers on every answer."""

    def __init__(self, app: Any, sessions: Sessions) -> None:
        super().__init__(app)
        self.sessions = sessions

    async def dispatch(self, request: Request,
                       call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        path = request.url.path
        cookie = request.cookies.get(COOKIE)
        response: Response
        if path not in _OPEN and not path.startswith("/static/") and \
                not self.sessions.session_ok(cookie):
            if request.method == "GET" and not path.startswith("/api/"):
                response = RedirectResponse("/login", status_code=303)
            else:
                response = _json_error(MailboxActorsError(
                    ErrorCode.UNAUTHENTICATED, "sign in with the operator token first"))
        elif request.method == "POST" and not _same_origin(request):
            response = _json_error(MailboxActorsError(
                ErrorCode.PERMISSION_DENIED, "a console action must come from the console's own "
                "pages (Origin differs)"))
        else:
            response = await call_next(request)
        if path.startswith("/identities/") and "/messages/" in path and (
                path.endswith(("/body", "/raw")) or "/attachments/" in path):
            response.headers["content-security-policy"] = MAIL_CSP
        else:
            response.headers.setdefault("content-security-policy", PAGE_CSP)
        response.headers["x-content-type-options"] = "nosniff"
        response.headers["referrer-policy"] = "same-origin"
        response.headers["cache-control"] = "no-store"
        response.headers.setdefault("x-frame-options", "DENY")
        return response


def _same_origin(request: Request) -> bool:
    origin = request.headers.get("origin")
    if origin is None:  # not sent by every client on a same-origin POST; the CSRF token decides
        return True
    host = request.headers.get("host", "")
    return origin in (f"http://{host}", f"https://{host}")


def _json_error(e: MailboxActorsError) -> JSONResponse:
    return JSONResponse({"err": msgspec.to_builtins(e.to_body())}, status_code=e.http_status)


class _Pages:
    def __init__(self, settings: ConsoleSettings, view: ClusterView, sessions: Sessions,
                 env: jinja2.Environment) -> None:
        self.settings = settings
        self.view = view
        self.sessions = sessions
        self.env = env

    # ---- rendering -----------------------------------------------------------------------------

    async def render(self, request: Request, template: str, *, http_status: int = 200,
                     **context: Any) -> HTMLResponse:
        cookie = request.cookies.get(COOKIE, "")
        fragment = request.headers.get("x-console-fragment") == "1"
        html = self.env.get_template(template).render(
            request=request, dev=self.settings.dev, fragment=fragment,
            csrf=self.sessions.csrf_for(cookie) if cookie else "", csrf_field=CSRF_FIELD,
            refresh_ms=self.settings.refresh_ms, cursor=await self._cursor(),
            signed_in=self.sessions.session_ok(cookie), now_ms=self.view.now_ms(), **context)
        return HTMLResponse(html, status_code=http_status)

    async def _cursor(self) -> int:
        try:
            return await self.view.cursor()
        except Exception:  # the page still renders; the next refresh tries again
            return 0

    async def form(self, request: Request) -> dict[str, str]:
        """The POSTed form, its CSRF token checked; values are strings (a file is refused)."""
        form = await request.form()
        if not self.sessions.csrf_ok(request.cookies.get(COOKIE), _text(form.get(CSRF_FIELD))):
            raise MailboxActorsError(ErrorCode.PERMISSION_DENIED,
                                     "the form's CSRF token is missing or wrong: reload the page",
                                     details={"field": CSRF_FIELD})
        out = {}
        for k, v in form.items():
            if not isinstance(v, str):
                raise InvalidRequest("this form takes no file", details={"field": k})
            out[k] = v
        return out

    async def error(self, request: Request, exc: Exception) -> Response:
        assert isinstance(exc, MailboxActorsError)
        if request.url.path.startswith("/api/"):
            return _json_error(exc)
        return await self.render(request, "error.html", http_status=exc.http_status,
                                 err=exc.to_body())

    async def not_found(self, request: Request, exc: Exception) -> Response:
        return await self.error(request, UnknownPath("no such page in the console",
                                                     endpoints=["/"]))

    async def not_allowed(self, request: Request, exc: Exception) -> Response:
        return await self.error(request, MailboxActorsError(ErrorCode.METHOD_NOT_ALLOWED,
                                                            "this page does not take that method"))

    # ---- signing in ----------------------------------------------------------------------------

    async def login(self, request: Request) -> Response:
        if request.method == "GET":
            return await self.render(request, "login.html", failed=False)
        form = await request.form()
        given = _text(form.get("token")) or ""
        if not self.sessions.token_ok(given):
            return await self.render(request, "login.html", http_status=401, failed=True)
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, self.sessions.new_session(), httponly=True,
                            samesite="strict", path="/")
        return response

    async def logout(self, request: Request) -> Response:
        await self.form(request)
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    async def healthz(self, request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def api_cursor(self, request: Request) -> Response:
        return JSONResponse({"cursor": await self.view.cursor()})

    # ---- pages ---------------------------------------------------------------------------------

    async def overview(self, request: Request) -> Response:
        nodes = await self.view.node_statuses()
        counts = await self.view.counts()
        problems: list[str] = []
        spaces = await self._try(problems, self.view.namespaces())
        queues: dict[str, dict[str, int]] = {}
        for n in nodes:
            for q, s in (n.get("queues") or {}).items():
                queues.setdefault(q, s)  # one queue file: every node sees the same figures
        return await self.render(
            request, "overview.html", nodes=nodes, counts=counts, queues=queues,
            events_per_s=await self.view.events_per_s(),
            alarms_pending=sum(int(n.get("alarms_pending") or 0) for n in nodes),
            actors_active=sum(int(n.get("actors_active") or 0) for n in nodes),
            events=await self.view.recent_events(limit=10), refresh_always=True,
            spaces=spaces.namespaces if spaces else [], problems=problems)

    async def actors(self, request: Request) -> Response:
        problems: list[str] = []
        spaces = await self._try(problems, self.view.namespaces())
        return await self.render(request, "actors.html", identities=await self.view.identities(),
                                 domains=await self.view.domains(),
                                 tenants=await self.view.tenants(),
                                 spaces=spaces.namespaces if spaces else [], problems=problems)

    async def namespace(self, request: Request) -> Response:
        ns = request.path_params["namespace"]
        page = await self.view.actors(ns, request.query_params.get("cursor") or None)
        return await self.render(request, "namespace.html", ns=ns, page=page)

    async def actor(self, request: Request) -> Response:
        ns, oid = request.path_params["namespace"], request.path_params["object_id"]
        detail = await self.view.actor(ns, oid)
        problems: list[str] = []
        kv = await self._try(problems, self.view.kv(ns, oid, content=self.settings.dev))
        outbox = await self._try(problems, self.view.outbox(ns, oid))
        identity_id = (await self.view.identity_of_mailbox(oid)
                       if ns == "identity_mailbox" else None)
        dead = None
        if detail.tables and any(t.name == "post_jobs" for t in detail.tables):
            # A Post producer (PO-6): its dead letters, each with a Retry button.
            dead = await self._try(problems, self.view.owner_call(
                ns, oid, detail.meta, {"op": "post_dead_letters", "limit": 32}))
        return await self.render(request, "actor.html", a=detail, kv=kv, outbox=outbox,
                                 identity_id=identity_id, problems=problems, dead=dead,
                                 events=await self.view.object_events(oid))

    async def rows(self, request: Request) -> Response:
        ns, oid = request.path_params["namespace"], request.path_params["object_id"]
        table = request.path_params["table"]
        page = await self.view.rows(ns, oid, table, request.query_params.get("cursor") or None,
                                    content=self.settings.dev)
        return await self.render(request, "rows.html", ns=ns, oid=oid, page=page, still=True)

    async def identity(self, request: Request) -> Response:
        tenant, ident = await self.view.identity(request.path_params["identity_id"])
        after = request.query_params.get("after") or None
        cursor = request.query_params.get("cursor") or None
        if cursor is not None:
            check_id("cursor", cursor, "cursor")
        query = request.query_params.get("q") or None
        if query is not None and not self.settings.dev:
            raise MailboxActorsError(ErrorCode.PERMISSION_DENIED, "searching mail content is for "
                                     "dev mode on loopback", details={"field": "q"})
        if query is not None and len(query) > 1000:
            raise InvalidRequest("q must be 1..1000 characters", details={"field": "q"})
        resolving = request.query_params.get("resolve") or None  # a record's "resolve…" link
        if resolving is not None:
            check_id("resolve", resolving)
        status = messages = deliveries = dead = events = None
        problems: list[str] = []
        if ident.status == "active":
            status = await self._try(problems, self.view.mailbox_call(
                tenant, ident, {"op": "status"}))
            if query is not None:  # IN-10: the mailbox's full-text search, in dev mode only
                messages = await self.view.mailbox_call(tenant, ident, {
                    "op": "search_messages", "query": query, "limit": 25, "cursor": cursor})
            else:
                messages = await self._try(problems, self.view.mailbox_call(
                    tenant, ident, {"op": "list_messages", "limit": 25, "cursor": cursor}))
            dead = await self._try(problems, self.view.mailbox_call(
                tenant, ident, {"op": "post_dead_letters", "limit": 32}))
            events = await self._try(problems, self.view.mailbox_call(
                tenant, ident, {"op": "get_events", "after_sequence": 0, "limit": 1000}))
        deliveries = await self._try(problems, self.view.deliveries(ident, after))
        waits = await self._try(problems, self.view.rows(
            "identity_mailbox", ident.mailbox_id, "waits", None, content=self.settings.dev))
        addresses = await self.view.addresses(ident.id) if self.settings.dev else []
        if events is not None:
            events = {"events": list(reversed(events["events"]))[:25]}
        return await self.render(
            request, "identity.html", tenant=tenant, ident=ident, status=status,
            messages=messages, deliveries=deliveries, dead=dead, events=events, waits=waits,
            addresses=addresses, problems=problems, query=query, resolving=resolving,
            still=resolving is not None)  # no refresh under an operator filling the form

    async def _try(self, problems: list[str], call: Awaitable[Any]) -> Any:
        """One panel's data, or None with what kept it away noted (the rest of the page shows)."""
        try:
            return await call
        except MailboxActorsError as e:
            problems.append(f"{e.code}: {e.message}")
            return None

    async def message(self, request: Request) -> Response:
        tenant, ident = await self.view.identity(request.path_params["identity_id"])
        mid = check_id("message_id", request.path_params["message_id"])
        msg = await self.view.mailbox_call(tenant, ident, {"op": "get_message", "message_id": mid})
        if msg is None:
            raise MailboxActorsError(ErrorCode.EMAIL_NOT_FOUND, "no such message in this mailbox",
                                     details={"message_id": mid})
        # A message does not change: its page (and the frame of its body) is not refreshed.
        return await self.render(request, "message.html", tenant=tenant, ident=ident, msg=msg,
                                 still=True)

    async def message_body(self, request: Request) -> Response:
        """The message's HTML (or text) alone, for the sandboxed frame: dev mode only."""
        if not self.settings.dev:
            raise MailboxActorsError(ErrorCode.PERMISSION_DENIED,
                                     "message content is shown only in dev mode on loopback")
        tenant, ident = await self.view.identity(request.path_params["identity_id"])
        mid = check_id("message_id", request.path_params["message_id"])
        msg = await self.view.mailbox_call(tenant, ident, {"op": "get_message", "message_id": mid})
        if msg is None:
            raise MailboxActorsError(ErrorCode.EMAIL_NOT_FOUND, "no such message in this mailbox",
                                     details={"message_id": mid})
        if msg.get("html"):
            return HTMLResponse(msg["html"])
        text = markupsafe.escape(msg.get("text") or "")
        return HTMLResponse(f"<pre style=\"white-space:pre-wrap\">{text}</pre>")

    async def message_raw(self, request: Request) -> Response:
        """The message as it was received (UI-2), a megabyte at a time from the mailbox: dev mode
        only; shown as plain text, or downloaded as ``.eml`` with ``?download=1``."""
        tenant, ident, mid = await self._content_of(request)
        first = await self._chunk(tenant, ident, {"op": "get_raw_message", "message_id": mid})
        if not first["kept"]:
            raise MailboxActorsError(ErrorCode.EMAIL_NOT_FOUND, "this message's raw source was not kept "
                                     "(received before raw sources were)",
                                     details={"message_id": mid})
        download = request.query_params.get("download") == "1"
        headers = {"content-disposition": f'attachment; filename="{mid}.eml"'} if download else {}
        return StreamingResponse(
            self._chunks(tenant, ident, {"op": "get_raw_message", "message_id": mid}, first),
            media_type="message/rfc822" if download else "text/plain; charset=utf-8",
            headers=headers)

    async def attachment(self, request: Request) -> Response:
        """One attachment's content (UI-2), dev mode only: always downloaded as bytes, never
        rendered (whatever type it claims), under the mail's sandboxing policy."""
        tenant, ident, mid = await self._content_of(request)
        part = int(request.path_params["part"])
        if not 0 <= part <= 10_000:
            raise InvalidRequest("part must be 0..10000", details={"field": "part"})
        req = {"op": "get_attachment", "message_id": mid, "part": part}
        first = await self._chunk(tenant, ident, req)
        name = "".join(c if c.isalnum() or c in "._-" else "_"
                       for c in (first.get("filename") or f"part-{part}"))[:100] or f"part-{part}"
        return StreamingResponse(self._chunks(tenant, ident, req, first),
                                 media_type="application/octet-stream",
                                 headers={"content-disposition": f'attachment; filename="{name}"'})

    async def _content_of(self, request: Request) -> tuple[Tenant, Identity, str]:
        if not self.settings.dev:
            raise MailboxActorsError(ErrorCode.PERMISSION_DENIED,
                                     "message content is shown only in dev mode on loopback")
        tenant, ident = await self.view.identity(request.path_params["identity_id"])
        return tenant, ident, check_id("message_id", request.path_params["message_id"])

    async def _chunk(self, tenant: Tenant, ident: Identity, req: dict[str, Any]) -> Any:
        got = await self.view.mailbox_call(tenant, ident, req)
        if got is None:
            raise MailboxActorsError(ErrorCode.EMAIL_NOT_FOUND, "no such message (or part) in this "
                                     "mailbox", details={"message_id": req["message_id"]})
        return got

    async def _chunks(self, tenant: Tenant, ident: Identity, req: dict[str, Any],
                      first: Any) -> AsyncIterator[bytes]:
        """Every chunk's bytes, the first already read; the next asked for only when sent."""
        got = first
        while True:
            yield base64.b64decode(got["data"])
            if got["chunk"] + 1 >= got["chunks"]:
                return
            got = await self._chunk(tenant, ident, {**req, "chunk": got["chunk"] + 1})

    async def thread(self, request: Request) -> Response:
        tenant, ident = await self.view.identity(request.path_params["identity_id"])
        tid = check_id("thread_id", request.path_params["thread_id"])
        thread = await self.view.mailbox_call(tenant, ident, {"op": "get_thread", "thread_id": tid})
        if thread is None:
            raise MailboxActorsError(ErrorCode.EMAIL_NOT_FOUND, "no such thread in this mailbox",
                                     details={"thread_id": tid})
        listed = await self.view.mailbox_call(tenant, ident, {"op": "list_messages",
                                                              "thread_id": tid, "limit": 200})
        return await self.render(request, "thread.html", tenant=tenant, ident=ident,
                                 thread=thread, messages=listed["messages"])

    async def queues(self, request: Request) -> Response:
        """Queue depths from the nodes, and each queue's dead letters with a Redrive button."""
        nodes = await self.view.node_statuses()
        depths: dict[str, dict[str, int]] = {}
        for n in nodes:
            for q, st in (n.get("queues") or {}).items():
                depths.setdefault(q, st)
        cursor = request.query_params.get("cursor") or None
        problems: list[str] = []
        letters = {}
        for q in sorted(depths):
            if q.endswith("-dlq"):
                continue
            page = await self._try(problems, self.view.dead_letters(q, cursor))
            if page is not None:
                letters[q] = page
        redriven = request.query_params.get("redriven")
        if redriven is not None:
            check_id("redriven", redriven)
        return await self.render(request, "queues.html", depths=depths, letters=letters,
                                 problems=problems, redriven=redriven)

    async def domains(self, request: Request) -> Response:
        rows = []
        problems: list[str] = []
        for tenant, dom in await self.view.domains():
            status = await self._try(problems, self.view.monitor_call(tenant, dom, "status"))
            rows.append((tenant, dom, status))
        return await self.render(request, "domains.html", rows=rows, problems=problems)

    async def domain(self, request: Request) -> Response:
        tenant, dom = await self.view.domain(request.path_params["domain_id"])
        status = await self.view.monitor_call(tenant, dom, "status")
        return await self.render(request, "domain.html", tenant=tenant, dom=dom, status=status)

    # ---- actions -------------------------------------------------------------------------------

    async def check_domain(self, request: Request) -> Response:
        await self.form(request)
        tenant, dom = await self.view.domain(request.path_params["domain_id"])
        await self.view.monitor_call(tenant, dom, "check")
        return RedirectResponse(f"/domains/{dom.id}", status_code=303)

    async def resolve(self, request: Request) -> Response:
        """Settle an ``outcome_unknown`` Email with the operator's evidence (CA-12)."""
        form = await self.form(request)
        tenant, ident = await self.view.identity(request.path_params["identity_id"])
        fields = {k: v.strip() for k, v in form.items()
                  if k in ("email_id", "source_id", "outcome", "provider_message_id", "code",
                           "evidence")
                  and v.strip()}
        try:
            req = msgspec.convert(fields | {"op": "resolve"}, ResolveEmail)
        except msgspec.ValidationError as e:
            raise InvalidRequest(f"the resolve form: {e}",
                                 details={"field": _field_of(str(e))}) from None
        await self.view.mailbox_call(tenant, ident, msgspec.to_builtins(req))
        return RedirectResponse(f"/identities/{ident.id}#outbound", status_code=303)

    async def redrive(self, request: Request) -> Response:
        """Send one dead letter back to its queue (UI-3)."""
        form = await self.form(request)
        queue = check_id("queue", request.path_params["queue"], "queue")
        message_id = check_id("message_id", form.get("message_id", ""))
        reply = await self.view.redrive(queue, message_id)
        done = reply.get("redriven") or []
        if not done:
            raise MailboxActorsError(ErrorCode.INVALID_REQUEST,
                                     "no such dead letter (already redriven?)",
                                     details={"message_id": message_id})
        return RedirectResponse(f"/queues?redriven={message_id}", status_code=303)

    async def actor_post_retry(self, request: Request) -> Response:
        """Retry one of a Post producer's dead letters now (PO-6), as its recorded owner."""
        form = await self.form(request)
        ns, oid = request.path_params["namespace"], request.path_params["object_id"]
        key = form.get("key", "")
        if not 1 <= len(key) <= 200:
            raise InvalidRequest("key must be 1..200 characters", details={"field": "key"})
        detail = await self.view.actor(ns, oid)
        await self.view.owner_call(ns, oid, detail.meta, {"op": "post_retry", "key": key})
        return RedirectResponse(f"/actors/{ns}/{oid}#post", status_code=303)

    async def post_retry(self, request: Request) -> Response:
        """Retry one dead-lettered Post job of this mailbox now (PO-6)."""
        form = await self.form(request)
        tenant, ident = await self.view.identity(request.path_params["identity_id"])
        key = form.get("key", "")
        if not 1 <= len(key) <= 200:
            raise InvalidRequest("key must be 1..200 characters", details={"field": "key"})
        await self.view.mailbox_call(tenant, ident, {"op": "post_retry", "key": key})
        return RedirectResponse(f"/identities/{ident.id}#post", status_code=303)


def _size(n: int | None) -> str:
    if n is None:
        return "-"
    if n < 1024:
        return f"{n} B"
    if n < 1 << 20:
        return f"{n / 1024:.1f} KB"
    return f"{n / (1 << 20):.1f} MB"


def _cell(value: object) -> str:
    """A value read from an actor's table or KV, for a table cell: a redacted one as its type and
    size (CA-10), long text cut."""
    if isinstance(value, dict) and value.get("kind") == "redacted":
        return f"({value.get('type')}, {value.get('bytes')} B, hidden)"
    if value is None:
        return "null"
    text = value if isinstance(value, str) else msgspec.json.encode(value).decode()
    return text if len(text) <= 200 else text[:200] + "…"


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _field_of(message: str) -> str:
    """The field a msgspec validation message names (``... - at `$.code```)."""
    _, _, at = message.partition("`$.")
    return at.split("`")[0] or "form"
