"""Slow, independent references for the draft sources: plain-Python ranking of continuations."""

from __future__ import annotations

from collections import Counter


def rank(rows: list[tuple[int, ...]], width: int, keys: list[int] | None = None):
    """``[(tokens, score)]``: most frequent first tokens, each with its greedy most-frequent chain.

    Equally frequent tokens: the one whose rows (agreeing with the chain so far) have the smallest
    ``keys`` value wins; without ``keys``, the smaller token id wins.
    """
    keyed = list(zip(rows, range(len(rows)) if keys is None else keys, strict=True))

    def ordered(candidates, d):
        counts = Counter(r[d] for r, _ in candidates if len(r) > d)

        def tie(token):
            if keys is None:
                return token
            return min(k for r, k in candidates if len(r) > d and r[d] == token)

        return sorted(counts.items(), key=lambda kv: (-kv[1], tie(kv[0])))

    out = []
    for first, count in ordered(keyed, 0)[:width]:
        chain = [first]
        agree = [(r, k) for r, k in keyed if r[0] == first]
        while options := ordered(agree, len(chain)):
            chain.append(options[0][0])
            d = len(chain) - 1
            agree = [(r, k) for r, k in agree if len(r) > d and r[d] == chain[-1]]
        out.append((tuple(chain), float(count)))
    return out
