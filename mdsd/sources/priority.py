"""Several sources as one: each fills what the ones before it left of the width (SPECTRA §4.2.2).

SPECTRA (Le, Do, Nguyen, 2025) gives its internal guesses priority and fills the remaining guess
budget with retrieved ones, because internal guesses are accepted more often.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from mdsd.sources.base import Continuation, Source, check_request

__all__ = ["Priority", "SOURCE_NAMES", "make_source"]

SOURCE_NAMES = ("lookup", "datastore", "dictionary")


class Priority:
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


def make_source(spec: str, datastore: str | os.PathLike = "") -> Source:
    """The source a spec names: ``lookup`` (:class:`~mdsd.sources.PromptLookup`), ``dictionary``
    (:class:`~mdsd.sources.Dictionary`, empty: it learns while decoding), ``datastore`` (the
    :class:`~mdsd.sources.Datastore` saved in the directory ``datastore``), or several joined by ``,`` in
    priority order (:class:`Priority`). Each call builds fresh sources.

    >>> make_source("lookup,dictionary").name
    'prompt-lookup+dictionary'
    """
    from mdsd.sources.datastore import Datastore
    from mdsd.sources.dictionary import Dictionary
    from mdsd.sources.prompt_lookup import PromptLookup

    if not isinstance(spec, str) or not spec:
        raise ValueError(
            f"source must name one of {', '.join(SOURCE_NAMES)} (or several joined by ,), got {spec!r}"
        )
    made: list[Source] = []
    for name in spec.split(","):
        if name == "lookup":
            made.append(PromptLookup())
        elif name == "dictionary":
            made.append(Dictionary())
        elif name == "datastore":
            if not datastore:
                raise ValueError(
                    "source datastore needs a datastore directory (mdsd sources build ... --out DIR)"
                )
            made.append(Datastore.load(datastore))
        else:
            raise ValueError(f"source {name!r} must be one of {', '.join(SOURCE_NAMES)}")
    return made[0] if len(made) == 1 else Priority(made)
