"""The benchmark command's figures; see bench.command."""

__all__: list[str] = []
