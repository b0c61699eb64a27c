"""Trained drafters: what a draft model is trained on, and how (self-distillation, training).

* :mod:`mdsd.drafters.distill`: the target's own answers to training prompts, in resumable shards
  (``mdsd drafters distill``).
"""
