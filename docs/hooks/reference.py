"""MkDocs hook: the reference pages, generated at build time from what the code declares.

The command line from its argparse parser, the settings from ``NodeConfig`` and the flags that set
them, the errors from ``ErrorCode``'s table, the HTTP interface from ``openapi.json``. Nothing here is
restated by hand, so the reference cannot drift from the code.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]


def _cli() -> str:
    from mailbox_actors.cli import SUBCOMMANDS, build_parser

    parser = build_parser(every=True)
    out = ["# Command line", "",
           "Generated from the parser (`mailbox-actors COMMAND --help` prints the same).", "",
           "```text", parser.format_help().rstrip(), "```", ""]
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name in SUBCOMMANDS:
        p = sub.choices[name]
        out += [f"## `{name}`", "", "```text", p.format_help().rstrip(), "```", ""]
    return "\n".join(out)


def _settings() -> str:
    from mailbox_actors.node.settings import declared

    out = ["# Settings", "",
           "Every setting of `serve` and `cluster`, generated from their one declaration "
           "(`node/settings.py`). Precedence: flag, then environment variable, then the TOML file "
           "(`--config`, keys as named here); each is validated at start and a bad value is "
           "refused naming the setting. A setting without a flag is read from the environment "
           "and the file only.", "",
           "| setting (TOML key) | flag | environment variable | type | default | what it does |",
           "|---|---|---|---|---|---|"]
    for s in declared():
        flag = {"both": f"`{s.flag}`", "serve": f"`{s.flag}` (serve)",
                "cluster": f"`{s.flag}` (cluster)", "machine": f"`{s.flag}` (machine)",
                "file": "-"}[s.scope]
        typ = s.type.__name__ + (" or none" if s.optional else "")
        if s.choices:
            typ = " \\| ".join(s.choices)
        text = s.description.replace("|", "\\|")
        out.append(f"| `{s.name}` | {flag} | `{s.env}` | {typ} | `{s.default!r}` | {text} |")
    return "\n".join(out) + "\n"


def _errors() -> str:
    from mailbox_actors.wire.errors import ErrorCode

    out = ["# Errors", "",
           "Every error a caller can see (SPEC section 5), generated from the one table in "
           "`wire/errors.py` that decides them. An error body is "
           "`{\"code\", \"message\", \"retryable\", \"details\", \"request_id\"}`.", "",
           "| code | HTTP status | retryable | what to do |", "|---|---|---|---|"]
    for code in ErrorCode:
        out.append(f"| `{code.value}` | {code.http_status} | "
                   f"{'yes' if code.retryable else 'no'} | {code.default_fix} |")
    out += ["", "## Which code when something is absent", "",
            "SPEC section 5 has four not-found codes and no general one; `details.field` names "
            "what was not found.", "",
            "- An object not initialised or erased: its namespace's own code "
            "(`identity_not_found` for an IdentityMailbox, `domain_not_found` for a "
            "DomainMonitor, `tenant_not_found` for TenantQuota, Notifier and, by default, a "
            "user's own objects).",
            "- An Email (`email_id`, `source_id`) or a received message (`message_id`, an "
            "attachment `part`, a thread in the console) the mailbox does not hold: "
            "`email_not_found`.",
            "- A Post envelope key nobody sent (`post_retry`): the producer's own code, as for the "
            "object itself (`identity_not_found` from a mailbox); Post on the control database "
            "answers `tenant_not_found`.",
            "- A path no endpoint serves (the node's, an inspection endpoint's, a console "
            "page's): HTTP 404, as RPC-7 has it, with `invalid_request` in the body (SPEC 5's "
            "table has no code for a path) and `details.field` = `path`.",
            "- `method_not_allowed` (405) is RPC-7's wrong-method answer, with an `allow` "
            "header."]
    return "\n".join(out) + "\n"


def _schema_name(schema: dict[str, Any]) -> str:
    ref = schema.get("$ref", "")
    return ref.rsplit("/", 1)[-1] if ref else schema.get("type", "")


def _http() -> str:
    doc = json.loads((ROOT / "openapi.json").read_text())
    out = ["# HTTP interface", "",
           f"Generated from `openapi.json` (OpenAPI {doc['openapi']}; a node serves it at "
           "`GET /openapi.json`, and `mailbox-actors openapi` prints it).", ""]
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            out += [f"## `{method.upper()} {path}`", ""]
            if op.get("description") or op.get("summary"):
                out += [(op.get("summary") or op.get("description")).strip(), ""]
            params = op.get("parameters", [])
            if params:
                out += ["| parameter | in | required | schema |", "|---|---|---|---|"]
                for p in params:
                    out.append(f"| `{p['name']}` | {p['in']} | {'yes' if p.get('required') else 'no'}"
                               f" | `{_schema_name(p.get('schema', {}))}` |")
                out.append("")
            body = op.get("requestBody", {}).get("content", {}).get("application/json")
            if body:
                out += [f"Body: `{_schema_name(body.get('schema', {}))}`.", ""]
            codes = ", ".join(f"`{c}`" for c in op.get("responses", {}))
            out += [f"Answers: {codes}.", ""]
    return "\n".join(out)


def _adrs() -> str:
    out = ["# Decisions", "",
           "Architecture decision records: each says its context, the decision and its consequences; "
           "measurements live in the [performance record](../performance/record.md).", ""]
    for path in sorted((ROOT / "docs" / "adr").glob("[0-9]*.md")):
        title = path.read_text().split("\n", 1)[0].lstrip("# ").strip()
        out.append(f"- [{title}]({path.name})")
    return "\n".join(out) + "\n"


PAGES = {"adr/index.md": _adrs, "reference/cli.md": _cli, "reference/settings.md": _settings,
         "reference/errors.md": _errors, "reference/http.md": _http}


def on_files(files: Files, config: MkDocsConfig) -> Files:
    for uri, make in PAGES.items():
        files.append(File.generated(config, uri, content=make()))
    return files
