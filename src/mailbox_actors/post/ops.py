"""A producer's Post ops over RPC (PO-6): ``post_dead_letters`` and ``post_retry``.

A producing actor adds ``PostDeadLetters | PostRetry`` to its request union and hands them here
(``case PostDeadLetters() | PostRetry(): return post_op(self.post, req)``), so its owner, or an
operator acting for it, can see its dead letters and put one back in line.
"""

from __future__ import annotations

from mailbox_actors.post.actor_post import Post
from mailbox_actors.wire.post import DeadLetterPage, PostDeadLetters, PostRetry, PostRetryReply

__all__ = ["post_op"]


def post_op(post: Post, req: PostDeadLetters | PostRetry) -> DeadLetterPage | PostRetryReply:
    if isinstance(req, PostDeadLetters):
        return post.dead_letters(req.after, req.limit)
    action = post.sql.transaction_sync(lambda tx: post.retry(tx, req.key))
    return PostRetryReply(action=action.value)
