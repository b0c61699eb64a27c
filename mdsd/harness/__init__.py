"""The experiment harness: what the scripts of experiments/, the benchmarks and ``mdsd report`` share.

* :mod:`mdsd.harness.experiment`: an experiment's config from the command line, its run folder, results
  written as strict JSON + CSV with their provenance, the checkpoint of an interrupted sweep, and
  :func:`~mdsd.harness.experiment.main`, which runs a script and turns bad input into one line, as ``mdsd``
  does;
* :mod:`mdsd.harness.sweep`: a sweep's tasks run here or on Ray, checkpointed;
* :mod:`mdsd.harness.report`: the optimal and exact acceptance of every draft law and verifier
  (``mdsd report``);
* :mod:`mdsd.harness.comparison`: every method (HF's baselines, mdsd's trees) decoded on the same prompts,
  seeds and budget and measured the same way (:func:`compare`);
* :mod:`mdsd.harness.methods`: decoding methods named by a spec and swept over a model pair (the experiments
  batch_efficiency.py and draft_sources.py).

It sits above everything it measures (laws, verifiers, the decoder, drafters, the Hugging Face glue of
:mod:`mdsd.hf`) and below the command line; nothing under it imports it (tests/test_layers.py).
"""

from mdsd.harness.comparison import (
    BASELINES,
    Comparison,
    ComparisonRow,
    HFAssisted,
    HFAutoregressive,
    PromptRun,
    TreeMethod,
    compare,
    ratio_interval,
)

__all__ = [
    "compare",
    "Comparison",
    "ComparisonRow",
    "PromptRun",
    "HFAutoregressive",
    "HFAssisted",
    "TreeMethod",
    "BASELINES",
    "ratio_interval",
]
