"""Where a command takes a secret from (OPS-8): a file, the environment or standard input, so it
never has to sit on the command line, where ``ps`` and the shell's history show it.

For a tenant's webhook secret, in this order: ``--webhook-secret-file PATH``, ``--webhook-secret -``
(one line read from standard input), ``--webhook-secret VALUE`` (allowed, but visible to other
users of the machine), then ``MAILBOX_ACTORS_WEBHOOK_SECRET``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping

__all__ = ["WEBHOOK_SECRET_ENV", "SecretError", "add_webhook_secret_arguments", "webhook_secret"]

WEBHOOK_SECRET_ENV = "MAILBOX_ACTORS_WEBHOOK_SECRET"


class SecretError(Exception):
    """The secret named cannot be read: a usage error (exit 2)."""


def add_webhook_secret_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--webhook-secret-file", dest="webhook_secret_file", metavar="PATH",
                   help="read the webhook HMAC key (16+ characters) from this file")
    p.add_argument("--webhook-secret", dest="webhook_secret", metavar="SECRET",
                   help="the webhook HMAC key; '-' reads it from standard input (a value given "
                        f"here is visible in ps: prefer the file, '-' or {WEBHOOK_SECRET_ENV})")


def webhook_secret(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if env is None else env
    path: str | None = getattr(args, "webhook_secret_file", None)
    given: str | None = getattr(args, "webhook_secret", None)
    if path is not None and given is not None:
        raise SecretError("give --webhook-secret-file or --webhook-secret, not both")
    if path is not None:
        try:
            with open(path) as f:
                text = f.read()
        except OSError as e:
            raise SecretError(f"--webhook-secret-file {path}: {e.strerror}") from None
        return _one_line(text, f"the file {path}")
    if given == "-":
        return _one_line(sys.stdin.readline(), "standard input")
    if given is not None:
        return given
    from_env = env.get(WEBHOOK_SECRET_ENV)
    return _one_line(from_env, WEBHOOK_SECRET_ENV) if from_env else None


def _one_line(text: str, where: str) -> str:
    secret = text.strip()
    if not secret:
        raise SecretError(f"{where} holds no webhook secret")
    return secret
