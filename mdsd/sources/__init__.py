"""Training-free draft sources: the context itself, a corpus, n-gram tables learnt while decoding.

Each source implements the :class:`Source` protocol (``propose(context, width, depth)`` and
``observe(context)``, :mod:`mdsd.sources.base`); its proposals are deterministic drafts.

* :class:`PromptLookup`: longest n-gram match in the prompt + output so far (prompt lookup; SSSD).
* :class:`Datastore`: longest suffix match in a suffix-array index of a corpus (REST; SSSD).
* :class:`Dictionary`: SPECTRA-CORE's forward/backward n-gram dictionaries, learnt online.
* :class:`Priority`: several sources in priority order (SPECTRA: internal first, retrieval fills up).

:func:`make_source` builds them from their spec names (``lookup``, ``datastore``, ``dictionary``, joined
by ``,``: :func:`source_names`), as ``mdsd decode --source`` and the methods' ``+SOURCE`` spell them; a new
source is one module whose class registers itself with :func:`register_source`.
"""

from mdsd.sources.prompt_lookup import PromptLookup  # isort: skip (registered first: the first users see)
from mdsd.sources.base import Continuation, Source, rank_continuations
from mdsd.sources.datastore import SEPARATOR, Datastore, encode_text
from mdsd.sources.dictionary import Dictionary, NGramTables
from mdsd.sources.priority import Priority
from mdsd.sources.registry import make_source, register_source, source_names
from mdsd.sources.suffix_array import suffix_array, suffix_range

__all__ = [
    "Continuation",
    "Source",
    "rank_continuations",
    "PromptLookup",
    "Datastore",
    "SEPARATOR",
    "encode_text",
    "Dictionary",
    "NGramTables",
    "Priority",
    "make_source",
    "register_source",
    "source_names",
    "suffix_array",
    "suffix_range",
]
