"""attnref.analysis.trained (chapter 6's statistics, for any model) and attnref.analysis.texts.

Everything here runs on small random tensors with known answers; the real model is in
``tests/test_minilm.py``. Each test names the bug it would catch where that is not obvious.
"""

from __future__ import annotations

import math

import pytest
import torch

from attnref.analysis import logit_scale, stats, trained
from attnref.analysis.texts import SENTENCES


def randn(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


# --- the text set --------------------------------------------------------------------------------

def test_text_set_is_long_and_varied():
    assert len(SENTENCES) >= 60
    assert len(set(SENTENCES)) == len(SENTENCES)                       # no duplicates
    words = [len(s.split()) for s in SENTENCES]
    assert min(words) <= 3 and max(words) >= 30                       # very short and long ones
    assert sum(s.endswith("?") for s in SENTENCES) >= 3                # questions too
    assert all(s == s.strip() and s for s in SENTENCES)


# --- weights -------------------------------------------------------------------------------------

def test_fused_spectrum_is_the_spectrum_of_the_product(gen):
    w_q, w_k = randn(gen, 3, 20, 4), randn(gen, 3, 20, 4)
    full = torch.linalg.svdvals(w_q @ w_k.transpose(-2, -1))          # (3, 20)
    core = trained.fused_spectrum(w_q, w_k)                           # (3, 4)
    assert core.shape == (3, 4)
    assert (core - full[:, :4]).abs().max() < 1e-12 * full.max()
    assert full[:, 4:].max() < 1e-12 * full.max()                     # the rest is round-off
    # a key head shared by several query heads (grouped-query attention) broadcasts
    shared = trained.fused_spectrum(w_q, w_k[:1])
    assert (shared[2] - torch.linalg.svdvals(w_q[2] @ w_k[0].T)[:4]).abs().max() < 1e-12 * full.max()


def test_fused_spectrum_bad_input(gen):
    with pytest.raises(ValueError, match="same d_k"):
        trained.fused_spectrum(randn(gen, 20, 4), randn(gen, 20, 3))
    with pytest.raises(ValueError, match="same d_k"):
        trained.fused_spectrum(randn(gen, 3, 4), randn(gen, 3, 4))      # d_k > d
    with pytest.raises(ValueError, match="one dtype"):
        trained.fused_spectrum(randn(gen, 20, 4), randn(gen, 20, 4).float())


def _packed(gen, h, d, d_k):
    """A torch-style packed projection (out, in) = (h·d_k, d), as BERT and MultiheadAttention store it."""
    return randn(gen, h * d_k, d)


def _split(weight, h):
    """attnref's head split: (h·d_k, d) -> (h, d, d_k)."""
    d_k = weight.shape[0] // h
    return weight.T.reshape(weight.shape[1], h, d_k).permute(1, 0, 2)


def test_exact_rank_check_catches_a_wrong_head_width(gen):
    """The mutation the notebook's H2 check is there for: 4 heads of 8 read as 2 heads of 16."""
    d, h, d_k = 32, 4, 8
    w_q, w_k = _packed(gen, h, d, d_k), _packed(gen, h, d, d_k)
    right = trained.fused_spectrum(_split(w_q, h), _split(w_k, h))
    wrong = trained.fused_spectrum(_split(w_q, 2), _split(w_k, 2))
    assert right.shape[-1] == d_k and (right > 1e-8 * right.max()).all()
    assert wrong.shape[-1] == 16 and int((wrong > 1e-8 * wrong.max()).sum(-1).min()) == 16 != d_k


def test_column_rank_margin_certifies_full_rank_and_catches_a_lost_column(gen):
    w = _split(_packed(gen, 4, 32, 8), 4)                                # (4, 32, 8)
    assert (trained.column_rank_margin(w) > 1).all()
    broken = w.clone()
    broken[1, :, 3] = broken[1, :, 2]                                  # a duplicated column
    broken[2, :, 5] = 0                                                # a zeroed column
    margins = trained.column_rank_margin(broken)
    assert margins[0] > 1 and margins[3] > 1
    assert margins[1] < 1 and margins[2] < 1
    # float32 weights cast to float64 (exact): the certificate is about the float32 numbers
    assert (trained.column_rank_margin(w.float().double()) > 1).all()


def test_stable_and_energy_ranks():
    flat = torch.ones(2, 10, dtype=torch.float64)
    assert torch.allclose(trained.stable_rank(flat), torch.full((2,), 10.0, dtype=torch.float64))
    assert trained.energy_rank(flat, 0.9).tolist() == [9, 9]
    assert trained.energy_rank(flat, 1.0).tolist() == [10, 10]
    spike = torch.tensor([10.0, 1.0, 1.0, 1.0], dtype=torch.float64)
    assert abs(trained.stable_rank(spike).item() - 103 / 100) < 1e-15
    assert trained.energy_rank(spike, 0.9).item() == 1                 # 100/103 > 0.9
    assert trained.energy_rank(spike, 0.99).item() == 3                # 102/103 ≥ 0.99 > 101/103
    assert trained.energy_rank(spike.flip(0), 0.9).item() == 1         # sorted first
    with pytest.raises(ValueError, match="fraction"):
        trained.energy_rank(spike, 0.0)
    with pytest.raises(ValueError, match="negative"):
        trained.stable_rank(-spike)
    with pytest.raises(ValueError, match="all zero"):
        trained.stable_rank(torch.zeros(3, dtype=torch.float64))


# --- rows -------------------------------------------------------------------------------------

def _batch(gen, b=3, h=2, n=5, d_k=4):
    q, k = randn(gen, b, h, n, d_k), randn(gen, b, h, n, d_k) + 0.5
    key_mask = torch.tensor([[True] * n, [True] * 3 + [False] * (n - 3), [True] * 4 + [False] * (n - 4)])
    return q, k, key_mask


def test_pack_rows_keeps_real_rows_and_keys(gen):
    q, k, key_mask = _batch(gen)
    scores = q @ k.transpose(-2, -1)                                   # (b, h, n, n)
    rows = trained.pack_rows(scores, key_mask, first_sentence=10, width=7)
    assert rows.values.shape == (2, 12, 7) and rows.mask.shape == (12, 7)
    assert rows.sentence.tolist() == [10] * 5 + [11] * 3 + [12] * 4
    assert torch.equal(rows.values[:, 5, :3], scores[1, :, 0, :3])       # sentence 1, query 0
    assert (rows.values[~rows.mask.expand(2, -1, -1)] == 0).all()        # padded slots are 0
    assert rows.mask.sum(-1).tolist() == [5] * 5 + [3] * 3 + [4] * 4
    causal = trained.pack_rows(scores, key_mask, allowed=torch.ones(5, 5, dtype=torch.bool).tril())
    assert causal.mask.sum(-1).tolist() == [1, 2, 3, 4, 5, 1, 2, 3, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="width"):
        trained.pack_rows(scores, key_mask, width=4)
    with pytest.raises(ValueError, match="key_mask"):
        trained.pack_rows(scores, key_mask[:, :4])
    with pytest.raises(ValueError, match="self-attention"):
        trained.pack_rows(scores[..., :4], key_mask)


def test_within_row_variance_is_what_one_softmax_sees(gen):
    q, k, key_mask = _batch(gen)
    scores = q @ k.transpose(-2, -1)
    rows = trained.pack_rows(scores, key_mask, width=6)
    within = trained.within_row_variance(rows)                         # (h, R)
    assert torch.allclose(within[:, 6], scores[1, :, 1, :3].var(-1, correction=0))
    # a shift of a whole row (what the softmax ignores) leaves it unchanged; a pooled variance would move
    shifted = rows.like(rows.values + 5.0 * torch.arange(12.0, dtype=torch.float64)[:, None] * rows.mask)
    assert torch.allclose(trained.within_row_variance(shifted), within)
    causal = trained.pack_rows(scores, key_mask, allowed=torch.ones(5, 5, dtype=torch.bool).tril())
    assert torch.allclose(trained.within_row_variance(causal)[:, 2], scores[0, :, 2, :3].var(-1, correction=0))


def test_between_row_share_of_a_key_mean(gen):
    """Keys with a common mean μ_k shift row i by q_i·μ_k: the pooled variance grows, the within-row one does not."""
    q, k, key_mask = _batch(gen, b=1, n=40)
    key_mask = torch.ones(1, 40, dtype=torch.bool)
    rows = trained.pack_rows(q @ k.transpose(-2, -1), key_mask)
    shifted = trained.pack_rows(q @ (k + 3.0).transpose(-2, -1), key_mask)
    assert torch.allclose(trained.within_row_variance(shifted), trained.within_row_variance(rows))

    def pooled(r):
        return r.values.flatten(1).var(-1, correction=0)

    share = trained.between_row_share(trained.within_row_variance(shifted).mean(-1), pooled(shifted))
    assert (share > trained.between_row_share(trained.within_row_variance(rows).mean(-1), pooled(rows))).all()


def test_kl_and_total_variation(gen):
    p = torch.softmax(randn(gen, 3, 4, 6), -1)
    r = torch.softmax(randn(gen, 3, 4, 6), -1)
    assert trained.kl_rows(p, p).abs().max() < 1e-15
    assert (trained.kl_rows(p, r) - (p * (p / r).log()).sum(-1)).abs().max() < 1e-14
    tv = trained.total_variation_rows(p, r)
    assert ((tv >= 0) & (tv <= 1)).all()
    assert (tv <= (trained.kl_rows(p, r) / 2).sqrt() + 1e-15).all()    # Pinsker
    p0 = torch.tensor([[0.5, 0.5, 0.0]], dtype=torch.float64)
    r0 = torch.tensor([[0.25, 0.25, 0.5]], dtype=torch.float64)
    assert abs(trained.kl_rows(p0, r0).item() - math.log(2)) < 1e-15
    with pytest.raises(ValueError, match="infinite"):
        trained.kl_rows(r0, p0)
    with pytest.raises(ValueError, match="negative"):
        trained.kl_rows(-p, r)
    with pytest.raises(ValueError, match="must match"):
        trained.total_variation_rows(p, r[:, :3])


def test_kl_to_logits_equals_kl_of_the_maps(gen):
    q, k, key_mask = _batch(gen)
    rows = trained.pack_rows(q @ k.transpose(-2, -1), key_mask, width=6)
    target = trained.masked_softmax(rows.like(rows.values / 2))
    other = rows.like(rows.values * 0.3)
    expected = trained.kl_rows(target, trained.masked_softmax(other))
    assert (trained.kl_to_logits(target, other) - expected).abs().max() < 1e-13
    assert (trained.cross_entropy_rows(target, other) - logit_scale.attention_entropy(target) - expected).abs().max() < 1e-13
    assert (trained.masked_softmax(other)[~rows.mask.expand(2, -1, -1)] == 0).all()
    leaking = target.clone()
    leaking[0, 5, 4] = 0.5                                             # weight on a padded key
    leaking[0, 5] /= leaking[0, 5].sum()
    with pytest.raises(ValueError, match="masked key"):
        trained.kl_to_logits(leaking, other)


def test_fit_inverse_temperature_recovers_known_temperatures(gen):
    q, k, key_mask = _batch(gen, b=4, h=4, n=6)
    key_mask = torch.ones(4, 6, dtype=torch.bool)
    key_mask[0, 4:] = False
    unit_q = q / q.norm(dim=-1, keepdim=True)
    unit_k = k / k.norm(dim=-1, keepdim=True)
    cosines = trained.pack_rows(unit_q @ unit_k.transpose(-2, -1), key_mask)
    taus = torch.tensor([0.5, 3.0, 12.0, 40.0], dtype=torch.float64)
    target = trained.masked_softmax(cosines.like(taus[:, None, None] * cosines.values))
    per_head = trained.fit_inverse_temperature(target, cosines, per_head=True)
    assert per_head.shape == (4,) and ((per_head - taus).abs() / taus).max() < 1e-8
    one = trained.fit_inverse_temperature(target[1:2], trained.Rows(cosines.values[1:2], cosines.mask,
                                                                    cosines.sentence), start=20.0)
    assert one.shape == () and abs(one.item() - 3.0) < 1e-8
    capped = trained.fit_inverse_temperature(target[3:], trained.Rows(cosines.values[3:], cosines.mask,
                                                                      cosines.sentence), bounds=(0.1, 10.0))
    assert abs(capped.item() - 10.0) < 1e-12                           # the minimiser is beyond the bound
    best = trained.fit_inverse_temperature(target, cosines).item()     # one τ for all four: a minimum

    def mean_kl(tau):
        return trained.kl_to_logits(target, cosines.like(tau * cosines.values)).mean().item()

    assert mean_kl(best) < min(mean_kl(best * 0.99), mean_kl(best * 1.01))
    with pytest.raises(ValueError, match="bounds"):
        trained.fit_inverse_temperature(target, cosines, bounds=(2.0, 1.0))
    with pytest.raises(ValueError, match="must match"):
        trained.fit_inverse_temperature(target[:2], cosines)


# --- sums over sentences and the bootstrap ---------------------------------------------------------

def test_per_sentence_and_ratio_replicates(gen):
    values = randn(gen, 2, 7)
    sentence = torch.tensor([0, 0, 1, 2, 2, 2, 1])
    sums = trained.per_sentence(values, sentence, 4)                   # (4, 2)
    assert torch.allclose(sums[2], values[:, 3:6].sum(-1)) and (sums[3] == 0).all()
    counts = torch.tensor([[1.0, 1.0, 1.0, 1.0], [2.0, 0.0, 2.0, 0.0]], dtype=torch.float64)
    a, b = randn(gen, 4, 3), randn(gen, 4, 3).abs() + 1
    replicates = trained.ratio_replicates(counts, a, b)
    assert torch.allclose(replicates[1], (2 * a[0] + 2 * a[2]) / (2 * b[0] + 2 * b[2]))


def test_bootstrap_counts_are_resamples(gen):
    twin = _same(gen)
    counts = trained.bootstrap_counts(10, 200, gen)
    assert counts.shape == (200, 10) and (counts.sum(1) == 10).all()
    assert torch.equal(counts, trained.bootstrap_counts(10, 200, twin))         # seeded
    assert abs(counts.mean().item() - 1) < 1e-12 and counts.var().item() > 0.5    # multinomial: var ≈ 0.9


def _same(gen):
    g = torch.Generator()
    g.set_state(gen.get_state())
    return g


def test_bootstrap_interval_of_a_mean_matches_its_standard_error(gen):
    """The bootstrap sd of a sample mean is s/√n (up to resampling noise and the n/(n−1) factor)."""
    x = randn(gen, 400)
    counts = trained.bootstrap_counts(400, 2000, gen)
    replicates = trained.ratio_replicates(counts, x[:, None], torch.ones(400, 1, dtype=torch.float64))[:, 0]
    interval = trained.bootstrap_interval(x.mean(), replicates, 1e-6)
    z = stats.normal_quantile(1e-6)
    expected = z * x.std().item() / math.sqrt(400)
    assert interval.bound == "bootstrap (asymptotic)" and interval.failure_probability == 1e-6
    assert abs(interval.half_width / expected - 1) < 0.1
    low, high = trained.bootstrap_band(x.mean()[None], replicates[:, None], 0.05)
    assert abs((high - low).item() / 2 - 1.96 / z * interval.half_width) < 1e-2 * interval.half_width


def test_norm_spread_and_dot_cosine_deviation(gen):
    x = randn(gen, 6, 5)
    off = ~torch.eye(6, dtype=torch.bool)
    equal = x / x.norm(dim=-1, keepdim=True) * 3.0                     # equal norms: dot = 9 cos
    assert trained.dot_cosine_deviation(*trained.pair_sums(equal, off)).item() < 1e-7
    assert trained.dot_cosine_deviation(*trained.pair_sums(x, off)).item() > 0.05
    norms = x.norm(dim=-1)
    cv = trained.coefficient_of_variation(norms.sum(), (norms ** 2).sum(), torch.tensor(6.0, dtype=torch.float64))
    assert abs(cv.item() - (norms.std(correction=0) / norms.mean()).item()) < 1e-12
    assert trained.between_row_share(torch.tensor(2.0), torch.tensor(2.5)).item() == pytest.approx(0.2)
