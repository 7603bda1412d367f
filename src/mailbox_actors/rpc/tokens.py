"""The tokens a command line or host service presents to a cluster (CL-4), found as the cluster's
supervisor recorded them. Kept apart from the client, so ``status`` reads the operator token
without importing the client's ids, clock and wire types (PERF: ``status`` within 1.2x of the
runtime libraries' import floor)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import msgspec

__all__ = ["read_token"]


def read_token(data_dir: str | Path, kind: str = "cluster",
               env: Mapping[str, str] | None = None) -> str:
    """The cluster (or ``kind="operator"``) token for the cluster on ``data_dir``, in CL-4's order:
    ``MAILBOX_ACTORS_TOKEN`` (``_OPERATOR_TOKEN``), then the file ``MAILBOX_ACTORS_TOKEN_FILE``
    (``_OPERATOR_TOKEN_FILE``) names, then the token file the supervisor recorded in
    cluster.json, then ``DATA/cluster.token`` (``operator.token``). Raises FileNotFoundError when
    none is there."""
    env = os.environ if env is None else env
    d = Path(data_dir)
    var = "MAILBOX_ACTORS_" + ("OPERATOR_TOKEN" if kind == "operator" else "TOKEN")
    if env.get(var):
        return env[var].strip()
    files = [env[var + "_FILE"]] if env.get(var + "_FILE") else []
    try:
        recorded = msgspec.json.decode((d / "cluster.json").read_bytes()).get(f"{kind}_token_file")
        if recorded:
            files.append(recorded)
    except (OSError, ValueError):
        pass
    files.append(str(d / f"{kind}.token"))
    for i, f in enumerate(files):
        try:
            return Path(f).read_text().strip()
        except FileNotFoundError:
            if i == 0 and env.get(var + "_FILE"):
                raise  # a file named on purpose that is not there is an error, not a fallback
    raise FileNotFoundError(2, "no token file", files[-1])
