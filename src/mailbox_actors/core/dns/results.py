"""Building verdicts: one ``RecordCheck`` per record, and what a DNS failure means for it.

A resolver that timed out, answered SERVFAIL or garbage says nothing about the domain, so it is
always ``unknown`` (DM-2), with the outcome in the code so an operator sees which one.
"""

from __future__ import annotations

from mailbox_actors.core.dns.answers import Answer, Outcome
from mailbox_actors.wire.domain import RecordCheck, Verdict

__all__ = ["MAX_MESSAGE", "combine", "fail", "ok", "transient", "unknown"]

# RecordCheck.message's cap: names quoted from DNS (an include path, the hosts found) can be long.
MAX_MESSAGE = 1024


def _cap(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE else message[:MAX_MESSAGE - 3] + "..."


def ok(record: str, code: str, message: str) -> RecordCheck:
    return RecordCheck(record=record, verdict=Verdict.PASS, code=code, message=_cap(message))


def fail(record: str, code: str, message: str) -> RecordCheck:
    return RecordCheck(record=record, verdict=Verdict.FAIL, code=code, message=_cap(message))


def unknown(record: str, code: str, message: str) -> RecordCheck:
    return RecordCheck(record=record, verdict=Verdict.UNKNOWN, code=code, message=_cap(message))


_TRANSIENT_WHY = {
    Outcome.TIMEOUT: "no nameserver answered in time",
    Outcome.SERVFAIL: "the nameservers answered SERVFAIL or refused",
    Outcome.ERROR: "the nameserver's reply could not be read",
}


def transient(record: str, answer: Answer) -> RecordCheck:
    """``unknown`` for a TIMEOUT, SERVFAIL or ERROR answer: the check is retried later."""
    why = _TRANSIENT_WHY.get(answer.outcome, "the lookup failed")
    detail = f" ({answer.detail})" if answer.detail else ""
    return unknown(record, f"dns_{answer.outcome.value}",
                   f"{answer.rtype} lookup of {answer.name}: {why}{detail}; the check is "
                   "retried and the domain's state is unchanged")


def combine(results: list[RecordCheck]) -> Verdict:
    """The run's verdict: fail when any record definitely fails; else unknown when any could not
    be read; else pass."""
    verdicts = {r.verdict for r in results}
    if Verdict.FAIL in verdicts:
        return Verdict.FAIL
    if Verdict.UNKNOWN in verdicts:
        return Verdict.UNKNOWN
    return Verdict.PASS
