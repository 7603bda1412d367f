"""The supervisor's description of a running cluster, ``DIR/cluster.json`` (CL-2, CL-3).

Written by ``cluster``; read by ``status`` and the other commands, by clients and by the benchmark.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["CLUSTER_FILE", "read_cluster_file"]

CLUSTER_FILE = "cluster.json"


def read_cluster_file(data_dir: Path) -> dict[str, Any]:
    """The supervisor's description of a running cluster (raises FileNotFoundError)."""
    return dict(json.loads((data_dir / CLUSTER_FILE).read_text()))
