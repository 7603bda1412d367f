"""Wire types only (msgspec Structs and enums); import from the modules."""

__all__: list[str] = []
