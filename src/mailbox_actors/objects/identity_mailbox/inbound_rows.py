"""How a received message's detail is stored (one msgpack value per row): shared by ``inbound``,
which writes and reads it, and ``waits``, which matches stored mail on registration."""

from __future__ import annotations

import msgspec

from mailbox_actors.wire.inbound import AttachmentView

__all__ = ["DETAIL_DECODER", "DETAIL_ENCODER", "StoredDetail"]


class StoredDetail(msgspec.Struct, array_like=True):
    to: list[str]
    cc: list[str]
    delivered_to: list[str]
    headers: list[tuple[str, str]]
    attachments: list[AttachmentView]
    defects: list[str]


DETAIL_ENCODER = msgspec.msgpack.Encoder()
DETAIL_DECODER = msgspec.msgpack.Decoder(StoredDetail)
