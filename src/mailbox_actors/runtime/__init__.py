"""The actor model, the host, migrations, the outbox and settings; import from the modules."""

__all__: list[str] = []
