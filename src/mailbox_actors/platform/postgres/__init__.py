"""The cluster's shared state on PostgreSQL (CL-6, CL-7): a pool (``database``), ordered
migrations per component under an advisory lock (``migrations``), a ``SharedStore`` for the
control data and the queues (``store``), LISTEN/NOTIFY (``listener``).

Needs the ``postgres`` extra (psycopg 3 and psycopg-pool): import the modules, not this package.
"""

__all__: list[str] = []
