"""The real-pair corpus: truncation, storage and reconstruction against exact softmaxes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mdsd.data.corpus import (
    TEMPERATURES,
    concat_records,
    load_corpus,
    real_pairs,
    save_corpus,
    truncate_logits,
)


def _corpus(tmp_path, zp, zq, m, datasets=("a",)):
    rec = truncate_logits(zp, zq, m)
    n = zp.shape[0]
    rec["dataset"] = np.zeros(n, dtype=np.int8)
    rec["prompt"] = np.zeros(n, dtype=np.int32)
    rec["position"] = np.arange(n, dtype=np.int32)
    rec["temperatures"] = np.array(TEMPERATURES)
    rec["dataset_names"] = np.array(datasets)
    return save_corpus(tmp_path / "c.npz", rec, {"made_by": "test"})


def _logits(rows: int, vocab: int, seed: int, scale: float = 3.0) -> torch.Tensor:
    return scale * torch.randn(
        rows, vocab, generator=torch.Generator().manual_seed(seed), dtype=torch.float64
    )


@pytest.mark.parametrize("temperature", [0.3, 0.6, 1.0])
def test_reconstruction_is_exact_on_the_support_and_in_the_tail_mass(tmp_path, temperature):
    zp, zq = _logits(7, 50, 0), _logits(7, 50, 1)
    path = _corpus(tmp_path, zp, zq, m=5)
    pairs = real_pairs(temperature, path)
    assert pairs.p.shape == pairs.q.shape and pairs.p.shape[0] == 7 == len(pairs)
    assert pairs.support.shape == (7, pairs.p.shape[1] - 1)
    for z, got in ((zp, pairs.p), (zq, pairs.q)):
        exact = torch.softmax(z / temperature, dim=1).numpy()
        for r in range(7):
            ids = pairs.support[r][pairs.support[r] >= 0]
            width = ids.size
            np.testing.assert_allclose(got[r, :width], exact[r, ids], rtol=1e-5, atol=1e-12)
            assert np.all(got[r, width:-1] == 0), "padding columns carry no mass"
            np.testing.assert_allclose(got[r, -1], 1 - exact[r, ids].sum(), rtol=1e-4, atol=1e-9)
        np.testing.assert_allclose(got.sum(axis=1), 1.0, atol=1e-12)


def test_support_is_the_union_of_both_top_m(tmp_path):
    zp, zq = _logits(4, 30, 2), _logits(4, 30, 3)
    pairs = real_pairs(1.0, _corpus(tmp_path, zp, zq, m=3))
    for r in range(4):
        expected = set(zp[r].topk(3).indices.tolist()) | set(zq[r].topk(3).indices.tolist())
        assert set(pairs.support[r][pairs.support[r] >= 0].tolist()) == expected


def test_full_support_has_an_empty_tail(tmp_path):
    zp, zq = _logits(3, 8, 4), _logits(3, 8, 5)
    pairs = real_pairs(0.6, _corpus(tmp_path, zp, zq, m=8))
    assert np.all(pairs.p[:, -1] == 0) and np.all(pairs.q[:, -1] == 0)
    np.testing.assert_allclose(pairs.p[:, :-1], torch.softmax(zp / 0.6, 1).numpy(), rtol=1e-5)


def test_lumping_overstates_the_overlap_by_at_most_the_tail(tmp_path):
    zp, zq = _logits(20, 200, 6, scale=1.0), _logits(20, 200, 7, scale=1.0)  # flat: big tails
    pairs = real_pairs(1.0, _corpus(tmp_path, zp, zq, m=4))
    full = torch.minimum(torch.softmax(zp, 1), torch.softmax(zq, 1)).sum(1).numpy()
    lumped = np.minimum(pairs.p, pairs.q).sum(1)
    bound = np.minimum(pairs.p[:, -1], pairs.q[:, -1])
    assert np.all(lumped >= full - 1e-6) and np.all(lumped <= full + bound + 1e-6)
    assert bound.max() > 0.1, "the test must exercise a real tail"


def test_unstored_temperature_and_bad_inputs_are_refused(tmp_path):
    path = _corpus(tmp_path, _logits(2, 10, 8), _logits(2, 10, 9), m=2)
    with pytest.raises(ValueError, match="temperature must be one of the stored"):
        real_pairs(0.33, path)
    with pytest.raises(ValueError, match="target_logits and draft_logits must be"):
        truncate_logits(torch.zeros(2, 5), torch.zeros(2, 6))
    with pytest.raises(ValueError, match="finite"):
        truncate_logits(torch.tensor([[0.0, float("nan")]]), torch.zeros(1, 2))
    with pytest.raises(ValueError, match="m must be in"):
        truncate_logits(torch.zeros(1, 5), torch.zeros(1, 5), m=6)
    with pytest.raises(ValueError, match="lacks"):
        save_corpus(tmp_path / "x.npz", {"offsets": np.zeros(1)}, {})


def test_concat_records_keeps_rows_apart():
    a = truncate_logits(_logits(2, 10, 10), _logits(2, 10, 11), m=2)
    b = truncate_logits(_logits(3, 10, 12), _logits(3, 10, 13), m=3)
    both = concat_records([a, b])
    assert both["offsets"].tolist() == a["offsets"].tolist() + (b["offsets"][1:] + a["offsets"][-1]).tolist()
    np.testing.assert_array_equal(both["support"], np.concatenate([a["support"], b["support"]]))
    assert both["target_tail"].shape == (5, len(TEMPERATURES))


def test_bundled_corpus_meets_the_brief():
    corpus = load_corpus()
    pairs = real_pairs(1.0)
    assert len(pairs) >= 1000
    assert len({(d, p) for d, p in zip(pairs.dataset, pairs.prompt, strict=True)}) >= 32
    assert set(pairs.dataset) == {"mt-bench", "humaneval", "news"}
    assert corpus["info"]["vocab_size"] == 151_936
    for temperature in (0.3, 0.6, 1.0):
        pairs = real_pairs(temperature)
        assert np.isfinite(pairs.p).all() and np.isfinite(pairs.q).all()
        np.testing.assert_allclose(pairs.p.sum(1), 1.0, atol=1e-12)
        np.testing.assert_allclose(pairs.q.sum(1), 1.0, atol=1e-12)
        assert pairs.support.max() < 151_936
