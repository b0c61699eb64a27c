"""Draft sources at corpus scale: build and lookup costs, and how often their drafts match real text.

Corpus: the .py files of the CPython standard library this interpreter runs on (sysconfig's
"stdlib" directory, site-packages excluded) and of a pinned wheel read from the mdsd cache
(transformers 5.23.0, downloaded once, never installed), each sorted by path, tokenised with the real
Qwen2.5-Coder tokenizer (``mdsd models fetch qwen2.5-coder`` first). Every ``holdout``-th file is held
out; the others, one document each, make the datastore. Queries: ``queries`` positions drawn
uniformly (seeded) from the held-out files, each with at least ``min_history`` tokens before it; the
context is the file up to that position (its last ``max_context`` tokens).

Per source (Datastore, PromptLookup on the same context, Dictionary learning the held-out files as it
walks them, in order): wall and CPU (this thread's) time of one ``propose(context, width, depth)``
call (on a shared machine the wall-time tail is mostly preemption), and against the text that
really follows: hit rate (some proposal), top-1 (the best first token is the next token), top-width
(some first token is), and the matched length of the best of the ``width`` chains (tokens a greedy
verifier would accept if the target wrote exactly this text).

Run:  python benchmarks/bench_sources.py [--queries 2000] [--holdout 20]
Writes benchmarks/results/drafters.json (+ .csv); the index goes to <mdsd cache>/datastores/.
"""

from __future__ import annotations

import os
import statistics
import sys
import sysconfig
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mdsd.data.wheels import cache_dir, download_wheels
from mdsd.harness.experiment import config_from_cli, write_results
from mdsd.sources import Datastore, Dictionary, PromptLookup, encode_text


@dataclass
class Config:
    pair: str = field(default="qwen2.5-coder", metadata={"help": "tokenizer: a fetched model pair"})
    wheel: str = field(default="transformers==5.23.0", metadata={"help": "pinned wheel whose .py files join"})
    holdout: int = field(default=20, metadata={"help": "every holdout-th file is held out for queries"})
    sort_depth: int = field(default=32, metadata={"help": "tokens each suffix is sorted on"})
    max_ngram: int = field(default=16, metadata={"help": "datastore: longest suffix matched (REST: 16)"})
    max_samples: int = field(default=256, metadata={"help": "datastore: occurrences read per lookup"})
    prompt_max_ngram: int = field(default=3, metadata={"help": "PromptLookup max_ngram (PLD: 3)"})
    dictionary_n: int = field(default=5, metadata={"help": "Dictionary n (SPECTRA's N)"})
    queries: int = field(default=2000, metadata={"help": "lookups timed per source"})
    min_history: int = field(default=32, metadata={"help": "tokens before a query position, at least"})
    max_context: int = field(default=1024, metadata={"help": "context = the last max_context tokens"})
    width: int = field(default=4, metadata={"help": "continuations asked per lookup"})
    depth: int = field(default=8, metadata={"help": "tokens per continuation, at most"})
    seed: int = field(default=0, metadata={"help": "seed of the query positions"})
    out_dir: str = field(default="benchmarks/results", metadata={"help": "where drafters.json goes"})


def python_sources(wheel: str) -> list[tuple[str, str]]:
    """``(name, text)`` of every stdlib .py file, then of every .py member of the pinned ``wheel``."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(p for p in root.rglob("*.py") if "site-packages" not in p.parts and p.is_file())
    out = [(str(p.relative_to(root)), p.read_text(encoding="utf-8", errors="replace")) for p in files]
    (path,) = download_wheels([wheel], cache_dir() / "wheels")
    with zipfile.ZipFile(path) as archive:
        for member in sorted(m for m in archive.namelist() if m.endswith(".py")):
            out.append((member, archive.read(member).decode("utf-8", errors="replace")))
    return out


def matched(proposal_tokens: tuple[int, ...], truth: np.ndarray) -> int:
    k = 0
    while k < min(len(proposal_tokens), truth.size) and proposal_tokens[k] == truth[k]:
        k += 1
    return k


def evaluate(name: str, source, queries, docs, cfg: Config, learn: bool) -> dict:
    times, cpu_times, hits, top1, topw, lengths = [], [], 0, 0, 0, []
    observe_us, learnt, current = 0.0, 0, None
    for doc_index, pos in queries:
        doc = docs[doc_index]
        context = doc[max(0, pos - cfg.max_context) : pos]
        if learn:
            if doc_index != current:  # a new file: a new cursor on the shared tables
                source, current, seen = source.fork(), doc_index, 0
            start = time.perf_counter_ns()
            source.observe(doc[:pos])  # the full prefix, as the decoder passes it
            observe_us += (time.perf_counter_ns() - start) / 1e3
            learnt, seen = learnt + pos - seen, pos
        start, cpu = time.perf_counter_ns(), time.thread_time_ns()
        proposals = source.propose(context, cfg.width, cfg.depth)
        cpu_times.append((time.thread_time_ns() - cpu) / 1e3)
        times.append((time.perf_counter_ns() - start) / 1e3)
        truth = doc[pos : pos + cfg.depth]
        if proposals:
            hits += 1
            top1 += proposals[0].tokens[0] == truth[0]
            topw += any(c.tokens[0] == truth[0] for c in proposals)
        lengths.append(max((matched(c.tokens, truth) for c in proposals), default=0))
    wall, cpu = np.percentile(times, [50, 90, 99]), np.percentile(cpu_times, [50, 90, 99])
    return {
        "source": name,
        "lookups": len(queries),
        "p50_us": round(float(wall[0]), 1),
        "p90_us": round(float(wall[1]), 1),
        "p99_us": round(float(wall[2]), 1),
        "max_us": round(max(times), 1),
        "mean_us": round(statistics.fmean(times), 1),
        "cpu_p50_us": round(float(cpu[0]), 1),
        "cpu_p90_us": round(float(cpu[1]), 1),
        "cpu_p99_us": round(float(cpu[2]), 1),
        "hit_rate": hits / len(queries),
        "top1": float(top1) / len(queries),
        "top_width": float(topw) / len(queries),
        "mean_matched": statistics.fmean(lengths),
        "observe_us_per_token": round(observe_us / learnt, 2) if learnt else None,
    }


def main(argv: list[str] | None = None) -> None:
    cfg = config_from_cli(Config, argv)
    from mdsd.hf import load_tokenizer, pair_paths

    tokenizer = load_tokenizer(pair_paths(cfg.pair)[0])
    files = python_sources(cfg.wheel)
    t0 = time.perf_counter()
    docs = [np.asarray(encode_text(text, tokenizer), dtype=np.int32) for _, text in files]
    tokenise_s = time.perf_counter() - t0
    held = [i for i in range(len(files)) if i % cfg.holdout == 0]
    train = [docs[i] for i in range(len(files)) if i % cfg.holdout != 0]
    corpus_info = {
        "corpus": f"CPython {sys.version.split()[0]} standard library + {cfg.wheel} wheel, .py files",
        "files": len(files),
        "datastore_files": len(train),
        "held_out_files": len(held),
        "tokenizer": cfg.pair,
    }

    t0 = time.perf_counter()
    store = Datastore.from_documents(train, sort_depth=cfg.sort_depth, info=corpus_info)
    build_s = time.perf_counter() - t0
    folder = cache_dir() / "datastores" / f"cpython-stdlib-{cfg.pair}"
    store.save(folder)
    size = sum(f.stat().st_size for f in folder.iterdir())
    store = Datastore.load(folder, max_ngram=cfg.max_ngram, max_samples=cfg.max_samples)

    rng = np.random.default_rng(cfg.seed)
    candidates = [(i, p) for i in held for p in range(cfg.min_history, docs[i].size - 1)]
    picks = np.sort(rng.choice(len(candidates), size=min(cfg.queries, len(candidates)), replace=False))
    queries = [candidates[j] for j in picks]  # in file order, so the Dictionary walks each file forward

    rows = [
        evaluate("datastore", store, queries, docs, cfg, learn=False),
        evaluate("prompt-lookup", PromptLookup(max_ngram=cfg.prompt_max_ngram), queries, docs, cfg, False),
        evaluate("dictionary", Dictionary(n=cfg.dictionary_n), queries, docs, cfg, learn=True),
    ]
    build = {
        **corpus_info,
        "corpus_tokens": int(sum(d.size for d in docs)),
        "datastore_tokens": len(store),
        "tokenise_s": round(tokenise_s, 1),
        "build_s": round(build_s, 1),
        "index_bytes": size,
        "index_dir": str(folder),
        "cpu": os.cpu_count(),
        "load_average": os.getloadavg(),
    }
    for row in rows:
        print(row)
    print(build)
    write_results(cfg.out_dir, "drafters", rows, cfg, cfg.seed, build=build)


if __name__ == "__main__":
    main()
