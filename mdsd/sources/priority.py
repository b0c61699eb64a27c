"""Several sources as one: each fills what the ones before it left of the width (SPECTRA §4.2.2).

SPECTRA (Le, Do, Nguyen, 2025) gives its internal guesses priority and fills the remaining guess
budget with retrieved ones, because internal guesses are accepted more often.
"""

from __future__ import annotations

from collections.abc import Sequence

from mdsd.sources.base import Continuation, Source, check_request

__all__ = ["Priority"]


class Priority(Source):
    """Sources in priority order; proposals with a first token already taken are skipped.

    ``propose`` asks each source in turn for the full ``width`` and keeps, in order, the
    continuations whose first token no earlier one has, until ``width`` are kept; scores are the
    sources' own (so they need not decrease across sources). ``observe`` goes to every source.

    >>> from mdsd.sources import PromptLookup, Datastore
    >>> both = Priority([PromptLookup(), Datastore.build([1, 2, 5, 1, 2, 6])])
    >>> [c.tokens for c in both.propose([1, 2, 7, 1, 2], width=3, depth=1)]
    [(7,), (5,), (6,)]
    """

    name = "priority"

    def __init__(self, sources: Sequence[Source]):
        if not sources:
            raise ValueError("sources must not be empty")
        self.sources = tuple(sources)
        self.name = "+".join(source.name for source in self.sources)

    def fork(self) -> Priority:
        """The same sources, each forked where it keeps per-sequence state (see Dictionary.fork)."""
        return Priority([s.fork() if hasattr(s, "fork") else s for s in self.sources])

    def propose(self, context: Sequence[int], width: int, depth: int) -> list[Continuation]:
        """At most ``width`` continuations, each source's best first, distinct first tokens."""
        check_request(width, depth)
        out: list[Continuation] = []
        taken: set[int] = set()
        for source in self.sources:
            for continuation in source.propose(context, width, depth):
                if len(out) == width:
                    return out
                if continuation.tokens[0] not in taken:
                    out.append(continuation)
                    taken.add(continuation.tokens[0])
        return out

    def observe(self, context: Sequence[int]) -> None:
        """Pass the context to every source."""
        for source in self.sources:
            source.observe(context)
