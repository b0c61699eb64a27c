"""The draft-source registry: a source class registers its spec name once, and every caller asks here.

``mdsd decode --source NAME``, the method specs ``TREE/VERIFIER+NAME`` (:mod:`mdsd.tree.spec`) and the
experiments build sources with :func:`make_source`; a source class decorated with :func:`register_source`
is found by its ``key`` and built by its ``from_spec(spec, datastore="")`` (``spec`` is the name, with
``:OPTIONS`` after it where the class takes some), so a new source is one module that registers itself.
"""

from __future__ import annotations

import os

from mdsd.sources.base import Source

__all__ = ["register_source", "source_names", "make_source"]

_SOURCES: dict[str, type] = {}  # registration order: the order users see


def register_source(cls: type) -> type:
    """Class decorator: build ``cls`` for the spec name ``cls.key`` (its ``from_spec``)."""
    key = getattr(cls, "key", None)
    if (
        not isinstance(key, str)
        or not key
        or "," in key
        or ":" in key
        or not callable(getattr(cls, "from_spec", None))
    ):
        raise TypeError(f"register_source takes a class with a spec name key and a from_spec, got {cls!r}")
    if _SOURCES.get(key, cls) is not cls:
        raise ValueError(f"source name {key!r} is already registered to {_SOURCES[key].__name__}")
    _SOURCES[key] = cls
    return cls


def source_names() -> tuple[str, ...]:
    """The registered sources' spec names, in registration order."""
    return tuple(_SOURCES)


def make_source(spec: str, datastore: str | os.PathLike = "") -> Source:
    """The source a spec names: a registered name (``lookup``: :class:`~mdsd.sources.PromptLookup`,
    ``dictionary``: :class:`~mdsd.sources.Dictionary`, empty, it learns while decoding; ``datastore``: the
    :class:`~mdsd.sources.Datastore` saved in the directory ``datastore``; ...), or several joined by ``,``
    in priority order (:class:`~mdsd.sources.Priority`). Each call builds fresh sources.

    >>> make_source("lookup,dictionary").name
    'prompt-lookup+dictionary'
    """
    from mdsd.sources.priority import Priority

    names = ", ".join(source_names())
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"source must name one of {names} (or several joined by ,), got {spec!r}")
    made = []
    for part in spec.split(","):
        name = part.partition(":")[0]
        if name not in _SOURCES:
            raise ValueError(f"source {part!r} must be one of {names}")
        made.append(_SOURCES[name].from_spec(part, datastore=datastore))
    return made[0] if len(made) == 1 else Priority(made)
