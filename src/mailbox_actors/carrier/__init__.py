"""Carrier as a library (CA-15): durable outbound email any actor builds over its own storage,
with a transport and the clock, and the seed's host contract.

An actor adds ``SCHEMA`` to its migrations, builds ``Carrier.for_actor(ctx)`` in its constructor,
maps the Carrier's alarm purpose to a method that awaits ``carrier.tick()``, and calls
``carrier.send(Submit(...))``. IdentityMailbox and Notifier are built on it.
"""

from __future__ import annotations

from mailbox_actors.carrier._carrier import Carrier
from mailbox_actors.carrier.host import ActorCarrierHost, CarrierHost
from mailbox_actors.carrier.schema import SCHEMA, TABLES
from mailbox_actors.carrier.state import CanSendHook, CarrierSettings, DispatchGate, GateRun
from mailbox_actors.wire.carrier import Receipt, Submit

__all__ = ["SCHEMA", "TABLES", "ActorCarrierHost", "CanSendHook", "Carrier", "CarrierHost",
           "CarrierSettings", "DispatchGate", "GateRun", "Receipt", "Submit"]
