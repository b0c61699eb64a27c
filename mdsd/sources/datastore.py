"""A retrieval datastore: a suffix array over a tokenised corpus, built once, saved, memory-mapped.

REST (He et al., 2024, "REST: Retrieval-Based Speculative Decoding") and SSSD (Marzollo et al.,
"Simply-Scalable Speculative Decoding", §3.1.2): match the longest suffix of the context in a large
corpus by binary search over its suffix array, and draft the most frequent continuations of that
match. Corpora are token ids; documents are joined with the separator -1, which no match spans and
no continuation crosses.

On disk (``Datastore.save``)::

    <dir>/tokens.npy        int32 [n]   the corpus (documents joined by -1)
    <dir>/suffix_array.npy  int32 [n]   suffix start positions (int64 if n >= 2^31)
    <dir>/datastore.json    sort depth, sizes and free-form ``info``; written last ("complete")
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from mdsd.sources.base import PAD, Continuation, Source, as_context, check_request, rank_continuations
from mdsd.sources.registry import register_source
from mdsd.sources.suffix_array import suffix_array, suffix_range
from mdsd.validation import check_positive_ints

__all__ = ["Datastore", "SEPARATOR", "encode_text"]

SEPARATOR = PAD  # document boundary in the corpus: -1
_MARKER = "datastore.json"
_FORMAT = 1
_SPLIT = re.compile(r"(?<=\n)(?=\S)")  # after a newline that a non-space character follows


def encode_text(text: str, tokenizer, chunk_chars: int = 1 << 16) -> list[int]:
    """Token ids of ``text`` (no special tokens), encoded in pieces of about ``chunk_chars`` characters.

    Pieces end after a newline that a non-whitespace character follows. Byte-level BPE tokenizers with
    GPT-2/Qwen2-style pre-tokenisation never merge across such a point (the newline run ends a
    pre-token, the next character starts one), so the ids equal those of one ``encode(text)`` call
    (tests check it on a Qwen2-style tokenizer); other tokenizers may differ at piece boundaries.
    """
    pieces, ids, start = _SPLIT.split(text), [], 0
    buffer: list[str] = []
    for piece in pieces:
        buffer.append(piece)
        start += len(piece)
        if start >= chunk_chars:
            ids += tokenizer.encode("".join(buffer), add_special_tokens=False)
            buffer, start = [], 0
    if buffer:
        ids += tokenizer.encode("".join(buffer), add_special_tokens=False)
    return ids


@register_source
class Datastore(Source):
    r"""Longest-suffix retrieval over a corpus (a suffix array), most frequent continuations first.

    With corpus :math:`t_0 \dots t_{n-1}` and context :math:`x_0 \dots x_{L-1}`, the match length is
    the largest :math:`m \in [m_{\min}, \min(m_{\max}, L)]` such that :math:`x_{L-m:L}` occurs in the
    corpus followed by a token (not the end, not a separator). Its R occurrences are one run
    ``sa[lo:hi]`` of the suffix array. Each gives the continuation :math:`t_{i+m : i+m+\text{depth}}`,
    cut at a separator or the end. If R > ``max_samples``, S = ``max_samples`` occurrences are used,
    taken at regular intervals of the sorted run, ``sa[lo + ⌊jR/S⌋]``, j = 0..S-1 (SSSD: sorted
    suffixes sampled evenly approximate the continuation law; REST keeps the first ones instead).
    Ranking is :func:`~mdsd.sources.rank_continuations` with rows in lexicographic order: first
    tokens by count (``score``, out of min(R, S)), ties to the smaller id; below each the greedy most
    frequent chain, ties to the smaller id. Lookup: O(log(m_max) · log R_1 · m_max) token compares
    (binary searches over m, each inside the run of the pattern's first token, R_1 long) plus
    O(S · depth); the context beyond its last ``max_ngram`` tokens is never read.

    Build with :meth:`build` (ids) or :meth:`from_texts` (a tokenizer), keep with :meth:`save`,
    reopen memory-mapped with :meth:`load`. The lookup options are per instance (``load`` takes them).

    Examples
    --------
    >>> store = Datastore.build([1, 2, 3, 1, 2, 3, 1, 2, 4], max_ngram=2)
    >>> [(c.tokens, c.score) for c in store.propose([9, 1, 2], width=2, depth=2)]
    [((3, 1), 2.0), ((4,), 1.0)]
    """

    name = "datastore"
    key = "datastore"

    @classmethod
    def from_spec(cls, spec: str, datastore: str | os.PathLike = "") -> Datastore:
        """The datastore saved in the directory ``datastore`` (spec ``datastore``)."""
        if spec != cls.key:
            raise ValueError(f"source {spec!r}: datastore takes no options")
        if not datastore:
            raise ValueError(
                "source datastore needs a datastore directory (mdsd sources build ... --out DIR)"
            )
        return cls.load(datastore)

    def __init__(
        self,
        tokens: np.ndarray,
        sa: np.ndarray,
        sort_depth: int,
        *,
        max_ngram: int = 16,
        min_ngram: int = 1,
        max_samples: int = 256,
        info: dict | None = None,
    ):
        if tokens.ndim != 1 or sa.shape != tokens.shape:
            raise ValueError(f"tokens and sa must be 1-D of one length, got {tokens.shape}, {sa.shape}")
        check_positive_ints({"max_ngram": max_ngram, "min_ngram": min_ngram, "max_samples": max_samples})
        if min_ngram > max_ngram:
            raise ValueError(f"min_ngram must be <= max_ngram, got {min_ngram} > {max_ngram}")
        if max_ngram >= sort_depth:
            raise ValueError(
                f"max_ngram must be < sort_depth={sort_depth} (the index orders {sort_depth} tokens), "
                f"got {max_ngram}"
            )
        # Base-class views: slicing a np.memmap costs microseconds of subclass bookkeeping per call.
        self.tokens, self.sa, self.sort_depth = np.asarray(tokens), np.asarray(sa), sort_depth
        # sa[starts[t + 1] : starts[t + 2]] holds the suffixes that begin with token t (-1 first).
        self._starts = np.concatenate(([0], np.cumsum(np.bincount(self.tokens + 1))))
        self.max_ngram, self.min_ngram, self.max_samples = max_ngram, min_ngram, max_samples
        self.info = dict(info or {})

    @classmethod
    def build(
        cls,
        token_ids: Sequence[int] | np.ndarray,
        *,
        sort_depth: int = 32,
        info: dict | None = None,
        **options,
    ) -> Datastore:
        """Index ``token_ids`` (ids >= 0; -1 separates documents), suffixes sorted on ``sort_depth``
        tokens. ``options`` are the lookup options (``max_ngram`` < ``sort_depth``, by default
        min(16, sort_depth - 1))."""
        tokens = np.asarray(token_ids)
        if tokens.ndim != 1 or tokens.size == 0 or (tokens.dtype.kind not in "iu"):
            raise ValueError(f"token_ids must be a non-empty 1-D sequence of ints, got {tokens!r:.80}")
        if tokens.min() < SEPARATOR or tokens.max() >= 2**31:
            raise ValueError("token_ids must be in [0, 2^31) or the separator -1")
        if isinstance(sort_depth, bool) or not isinstance(sort_depth, int) or sort_depth < 2:
            raise ValueError(f"sort_depth must be an int >= 2, got {sort_depth!r}")
        tokens = tokens.astype(np.int32)
        options.setdefault("max_ngram", min(16, sort_depth - 1))
        sa = suffix_array(tokens, sort_depth)
        sa = sa.astype(np.int32 if tokens.size < 2**31 else np.int64)
        return cls(tokens, sa, sort_depth, info=info, **options)

    @classmethod
    def from_documents(cls, documents: Iterable[Sequence[int]], **kwargs) -> Datastore:
        """:meth:`build` over documents (id sequences) joined by the separator -1."""
        parts: list[np.ndarray] = []
        for doc in documents:
            if parts:
                parts.append(np.array([SEPARATOR]))
            parts.append(np.asarray(doc, dtype=np.int64).reshape(-1))
        if not parts:
            raise ValueError("documents must not be empty")
        return cls.build(np.concatenate(parts), **kwargs)

    @classmethod
    def from_texts(cls, texts: Iterable[str], tokenizer, **kwargs) -> Datastore:
        """:meth:`from_documents` over ``texts`` encoded with ``tokenizer`` (:func:`encode_text`)."""
        return cls.from_documents((encode_text(text, tokenizer) for text in texts), **kwargs)

    def save(self, directory: str | os.PathLike) -> Path:
        """Write the index into ``directory`` (created); the JSON marker is written last."""
        folder = Path(directory)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / _MARKER).unlink(missing_ok=True)
        np.save(folder / "tokens.npy", np.asarray(self.tokens, dtype=np.int32))
        np.save(folder / "suffix_array.npy", np.asarray(self.sa))
        meta = {
            "format": _FORMAT,
            "tokens": int(self.tokens.size),
            "documents": int(np.count_nonzero(np.asarray(self.tokens) == SEPARATOR)) + 1,
            "sort_depth": self.sort_depth,
            "info": self.info,
        }
        (folder / _MARKER).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
        return folder

    @classmethod
    def load(cls, directory: str | os.PathLike, *, mmap: bool = True, **options) -> Datastore:
        """Open a saved index (memory-mapped unless ``mmap=False``) with lookup ``options``."""
        folder = Path(directory)
        marker = folder / _MARKER
        if not marker.is_file():
            raise FileNotFoundError(f"no complete datastore in {folder} (missing {_MARKER})")
        meta = json.loads(marker.read_text())
        if meta.get("format") != _FORMAT:
            raise ValueError(f"{marker} has format {meta.get('format')!r}, expected {_FORMAT}")
        mode = "r" if mmap else None
        tokens = np.load(folder / "tokens.npy", mmap_mode=mode)
        sa = np.load(folder / "suffix_array.npy", mmap_mode=mode)
        if tokens.size != meta["tokens"] or sa.size != meta["tokens"]:
            raise ValueError(
                f"{folder}: arrays hold {tokens.size}/{sa.size} entries, {marker} says {meta['tokens']}"
            )
        options.setdefault("max_ngram", min(16, meta["sort_depth"] - 1))
        return cls(tokens, sa, meta["sort_depth"], info=meta["info"], **options)

    def __len__(self) -> int:
        return int(self.tokens.size)

    def match(self, context: Sequence[int]) -> tuple[int, int]:
        """``(m, R)``: the match length and its number of occurrences with a next token (``(0, 0)``
        when no suffix of length >= ``min_ngram`` matches)."""
        m, lo, hi = self._match(as_context(context))
        return m, hi - lo

    def _match(self, ctx: np.ndarray) -> tuple[int, int, int]:
        # Binary search on m: if x[L-m:] occurs with a next token, so does x[L-m+1:] (one later).
        top = min(self.max_ngram, ctx.size)
        best = (0, 0, 0)
        low, high = self.min_ngram, top
        while low <= high:
            m = (low + high) // 2
            pattern = tuple(ctx[ctx.size - m :].tolist())
            if pattern[0] + 2 >= self._starts.size:  # a token id the corpus never has
                lo = hi = 0
            else:
                first = self._starts[pattern[0] + 1 : pattern[0] + 3].tolist()
                lo, hi = suffix_range(self.tokens, self.sa, pattern, first[0], first[1])
            if hi > lo:
                best, low = (m, lo, hi), m + 1
            else:
                high = m - 1
        return best

    def propose(self, context: Sequence[int], width: int, depth: int) -> list[Continuation]:
        """At most ``width`` continuations of ``context`` (see the class docstring), best first."""
        check_request(width, depth)
        m, lo, hi = self._match(as_context(context))
        if m == 0:
            return []
        count = hi - lo
        if count > self.max_samples:
            picks = lo + (np.arange(self.max_samples, dtype=np.int64) * count) // self.max_samples
        else:
            picks = np.arange(lo, hi)
        index = np.asarray(self.sa[picks], dtype=np.int64)[:, None] + m + np.arange(depth)  # [R, depth]
        n = self.tokens.size
        rows = np.asarray(self.tokens[np.minimum(index, n - 1)], dtype=np.int64)
        rows[index >= n] = PAD
        rows[np.cumsum(rows == PAD, axis=1) > 0] = PAD  # a continuation stops at a separator
        rows = rows[np.lexsort(rows.T[::-1])]
        return rank_continuations(rows, width)

    def observe(self, context: Sequence[int]) -> None:
        """Nothing to learn: the corpus is fixed."""

    def __repr__(self) -> str:
        return (
            f"Datastore({len(self)} tokens, sort_depth={self.sort_depth}, max_ngram={self.max_ngram}, "
            f"min_ngram={self.min_ngram}, max_samples={self.max_samples})"
        )
