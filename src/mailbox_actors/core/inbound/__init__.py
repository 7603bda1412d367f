"""Pure rules of inbound mail: parsing under caps, threading, wait filters (IN-1, IN-2, IN-4)."""

__all__: list[str] = []
