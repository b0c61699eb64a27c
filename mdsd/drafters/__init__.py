"""Trained drafters: what they are trained on, the feature head, the small drafter, and their training.

* :mod:`mdsd.drafters.distill`: the target's own answers to training prompts, in resumable shards
  (``mdsd drafters distill``);
* :mod:`mdsd.drafters.features`: the target's features and top-K laws at every position of them
  (``mdsd drafters features``);
* :class:`FeatureHead` (:mod:`mdsd.drafters.head`): one decoder layer over the target's hidden states,
  read by the target's output rows of a draft vocabulary (EAGLE's idea); a drafter of
  :class:`mdsd.TreeDecoder` on both paths;
* :mod:`mdsd.drafters.losses`: KL, total variation and the multi-draft optimum α*_k as training losses;
* :mod:`mdsd.drafters.train`: training a head (``mdsd drafters train``; torchrun for several processes);
* :class:`SmallDrafter` (:mod:`mdsd.drafters.small`): a few decoder layers of modest width over the target's
  embedding, with output rows of a draft vocabulary (seed 004's small drafters); its two stages in
  :mod:`mdsd.drafters.stages` (``mdsd drafters pretrain``, ``finetune``); it and the head draft over one
  cache, :class:`mdsd.drafters.cache.LayerCache`;
* :mod:`mdsd.drafters.answers`: any drafter's exact acceptance along the target's own answers, and greedy
  chains computed from it;
* :func:`load_target_and_drafter` (:mod:`mdsd.drafters.pair`): the target and the drafter a ``--draft``
  folder holds, a draft model, a head or a small drafter.

The drafters sit above the Hugging Face glue (:mod:`mdsd.hf`): their runs load the target through it.
"""

from mdsd.drafters.head import FeatureHead, HeadConfig
from mdsd.drafters.pair import is_head, load_target_and_drafter
from mdsd.drafters.small import SmallConfig, SmallDrafter
from mdsd.drafters.train import TrainConfig, train

__all__ = [
    "FeatureHead",
    "HeadConfig",
    "SmallDrafter",
    "SmallConfig",
    "TrainConfig",
    "train",
    "load_target_and_drafter",
    "is_head",
]
