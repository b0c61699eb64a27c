"""Shared fixtures of the tree-decoder tests."""

import pytest
import torch
from tiny_lms import perturbed, tiny_lm

torch.set_num_threads(1)  # the test machine is shared; tiny models gain nothing from threads


@pytest.fixture(scope="module")
def pair():
    """(target, draft): a target and a close draft sharing a vocabulary of 12."""
    target = tiny_lm(0)
    return target, perturbed(target, 0.3, seed=1)
