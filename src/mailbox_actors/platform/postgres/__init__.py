"""The cluster's shared state on PostgreSQL (CL-6, CL-7): a pool (``database``), ordered
migrations per component under an advisory lock (``migrations``), a ``SharedStore`` for the
control data and the queues (``store``), LISTEN/NOTIFY (``listener``), connection strings as
they may be shown (``dsn``), and a local server of the machine's binaries for the benchmark and
``make run-postgres`` (``local_server``). The control data's and the queues' schemas are
``control.postgres_schema`` and ``queues.postgres``; ADR 0018 says why it is built this way.

Needs the ``postgres`` extra (psycopg 3 and psycopg-pool): import the modules, not this package.
"""

__all__: list[str] = []
