"""Post's pure rules (PO-3, PO-5, PO-6): states, settlement decisions, retry backoff, dead letters.

No I/O, no clock, no randomness: the adapters in ``mailbox_actors.post`` read their store, ask these
functions what happens next, and write the answer. Import from the modules.
"""

__all__: list[str] = []
