"""``Carrier``: durable outbound email for any actor (CA-15), the seed's ``createCarrier``.

Built over the actor's storage (its tables: ``schema.SCHEMA``), a host (``CarrierHost``: commit
with a durable wake, events, ids, the clock), a transport and settings. ``send`` queues an Email
and its wake in one transaction; ``tick`` (from the wake) sends what is due; ``get`` reads a
receipt. The rules are the functions of ``requests`` and ``dispatch``; this class only holds what
they are given.
"""

from __future__ import annotations

from mailbox_actors.carrier import dispatch, requests
from mailbox_actors.carrier.host import ActorCarrierHost, CarrierHost
from mailbox_actors.carrier.state import CanSendHook, CarrierSettings, CarrierState, DispatchGate
from mailbox_actors.platform.mail.transport import MAIL_TRANSPORT, Transport
from mailbox_actors.platform.storage.sql import SqlStorage
from mailbox_actors.runtime.context import ActorContext
from mailbox_actors.wire.carrier import (
    ApplyDeliveryEvent,
    BeginTransport,
    CancelEmail,
    DeliveryEventReply,
    GetEmail,
    LearnMessageId,
    LearnMessageIdReply,
    Receipt,
    RecordTransportOutcome,
    ResolveEmail,
    Submit,
    TransportLease,
)

__all__ = ["Carrier"]


class Carrier:
    """One store's Carrier. Construct exactly one per store and actor lifetime."""

    __slots__ = ("_state",)

    def __init__(self, *, storage: SqlStorage, host: CarrierHost, transport: Transport | None,
                 settings: CarrierSettings | None = None, gate: DispatchGate | None = None,
                 can_send: CanSendHook | None = None) -> None:
        self._state = CarrierState(sql=storage, host=host, transport=transport,
                                   settings=settings or CarrierSettings(), gate=gate,
                                   can_send=can_send)

    @classmethod
    def for_actor(cls, ctx: ActorContext, *, purpose: str = "carrier",
                  transport: Transport | None = None, gate: DispatchGate | None = None,
                  can_send: CanSendHook | None = None) -> Carrier:
        """The Carrier of an actor of this runtime: its storage, its alarm purpose ``purpose``
        as the wake (the actor maps it to a method calling ``tick``), the node's transport
        unless ``transport`` is given, the node's cap and recheck settings."""
        st = ctx.settings
        return cls(storage=ctx.storage, host=ActorCarrierHost(ctx, purpose),
                   transport=transport if transport is not None else ctx.service(MAIL_TRANSPORT),
                   settings=CarrierSettings(recipient_cap=st.recipient_cap,
                                            recipient_cap_window_ms=st.recipient_cap_window_ms,
                                            recheck_ms=st.mail_recheck_ms,
                                            unreachable_window_ms=st.unreachable_window_ms),
                   gate=gate, can_send=can_send)

    def send(self, email: Submit) -> Receipt:
        """Queue ``email`` durably (its wake with it) and answer its receipt; a replay of its
        ``source_id`` answers the existing receipt, changed content ``conflict`` (CA-1, CA-2)."""
        return requests.submit(self._state, email)

    def send_in(self, tx: SqlStorage, email: Submit) -> Receipt:
        """``send`` inside a transaction the caller is running (a Post receiver's, say): the
        Email and its wake commit with the caller's own change, or not at all."""
        return requests.submit_in(self._state, tx, email)

    def get(self, source_id: str) -> Receipt | None:
        return requests.get_email(self._state, GetEmail(source_id=source_id))

    async def tick(self) -> None:
        """From the wake: settle interrupted dispatches, send what is due, re-arm the wake."""
        await dispatch.tick(self._state)

    def has_pending_work(self) -> bool:
        return dispatch.has_pending_work(self._state)

    def cancel(self, req: CancelEmail) -> Receipt:
        return requests.cancel(self._state, req)

    def resolve(self, req: ResolveEmail) -> Receipt:
        return requests.resolve(self._state, req)

    def apply_delivery_event(self, req: ApplyDeliveryEvent) -> DeliveryEventReply:
        return requests.apply_delivery_event(self._state, req)

    def learn_message_id(self, req: LearnMessageId) -> LearnMessageIdReply:
        """CA-17: the provider's final Message-ID of an Email (from its journal copy)."""
        return requests.learn_message_id(self._state, req)

    async def begin_transport(self, req: BeginTransport) -> TransportLease:
        return await dispatch.begin_transport(self._state, req)

    def record_transport_outcome(self, req: RecordTransportOutcome) -> Receipt:
        return dispatch.record_transport_outcome(self._state, req)
