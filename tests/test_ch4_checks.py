"""Chapter 4 (C1–C8): each claim's checks catch a plausible bug.

For every claim one bug that could slip into the implementation or the experiment is injected,
the claim's check is recomputed in miniature exactly as the notebook computes it, and the verdict
decided from that evidence must move away from the expected one (while the correct code gives the
expected verdict). The checks are the notebook's; only the sizes are smaller, so the tests are fast.
"""

from __future__ import annotations

import math

import pytest
import torch

import attnref
from attnref.analysis import logit_scale, stats
from attnref.book import claims

DELTA = 1e-7


def verdict(claim_id: str, record) -> str:
    evidence = claims.Evidence(claim_id)
    record(evidence)
    return claims.decide(evidence.checks)


def cosine_forgetting_the_key_norm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return attnref.luong_dot_scores(a, b) / a.norm(dim=-1, keepdim=True)          # no 1/‖b‖


# --- C1: a cosine that forgets the key's norm is not scale invariant ---------------------------------

@pytest.mark.parametrize("cosine, expected", [(attnref.cosine_scores, claims.HOLDS),
                                              (cosine_forgetting_the_key_norm, claims.NOT_ESTABLISHED)])
def test_c1_scale_invariance_check_catches_a_missing_key_norm(gen, cosine, expected):
    A, B = torch.randn(5, 8, generator=gen, dtype=torch.float64), torch.randn(6, 8, generator=gen, dtype=torch.float64)
    alphas, betas = 10 ** (6 * torch.rand(5, generator=gen, dtype=torch.float64) - 3), -10 ** (
        6 * torch.rand(6, generator=gen, dtype=torch.float64) - 3)
    error = (cosine(alphas[:, None] * A, betas[:, None] * B)
             - torch.sign(alphas[:, None] * betas[None, :]) * cosine(A, B)).abs().max()
    assert verdict("C1", lambda c1: c1.at_most("scale invariance", error, 1e-12, kind=claims.NUMERICAL)) == expected


# --- C2: cosine attention that forgets to normalise the keys fails the unit-query condition --------

def cosine_attention_unnormalised_keys(queries, keys, values, beta=1.0):
    unit = queries / queries.norm(dim=-1, keepdim=True)
    return attnref.attention_from_scores(beta * attnref.luong_dot_scores(unit, keys), values)


@pytest.mark.parametrize("cosine_attention, expected", [(attnref.cosine_attention, claims.CONDITIONS),
                                                        (cosine_attention_unnormalised_keys, claims.NOT_ESTABLISHED)])
def test_c2_condition_check_catches_unnormalised_keys(gen, cosine_attention, expected):
    queries = torch.randn(20, 4, generator=gen, dtype=torch.float64)
    keys = 3 * torch.randn(8, 4, generator=gen, dtype=torch.float64)
    unit = queries / queries.norm(dim=-1, keepdim=True)
    key_only = attnref.attention_from_scores(attnref.luong_dot_scores(unit, keys) / keys.norm(dim=-1),
                                             torch.eye(8, dtype=torch.float64)).weights
    gap = (attnref.attention_from_scores(attnref.luong_dot_scores(queries, keys) / keys.norm(dim=-1),
                                         torch.eye(8, dtype=torch.float64)).weights
           - attnref.cosine_attention(queries, keys, torch.eye(8, dtype=torch.float64)).weights).abs().max()

    def record(c2):
        c2.counterexample.at_least("non-unit queries: the weights differ", gap, 1e-9, kind=claims.NUMERICAL)
        c2.under("unit-norm queries").at_most(
            "key-norm-only = cosine attention", (key_only - cosine_attention(unit, keys, torch.eye(8, dtype=torch.float64)).weights).abs().max(),
            1e-12, kind=claims.NUMERICAL)

    assert verdict("C2", record) == expected


# --- C3: a t₃ sampler without the 1/√3 (variance 3) fails the clipped second-moment check ----------

# E[min(Y², c²)] and E[min(Y⁴, c⁴)] for Y = q k, q, k unit-variance t₃, c = 10 (the notebook's values).
T3_S2, T3_S4, CLIP = 0.7130815457456464, 21.181009419881143, 10.0


@pytest.mark.parametrize("factor, expected", [(1.0, claims.CONDITIONS), (math.sqrt(3.0), claims.NOT_ESTABLISHED)])
def test_c3_heavy_tail_check_catches_an_unscaled_t3_sampler(gen, factor, expected):
    samples, width = 20_000, 16
    draw = lambda: factor * logit_scale.standardised_components(logit_scale.STUDENT_T3, samples, width, generator=gen)
    clipped = (draw() * draw()).clamp(-CLIP, CLIP).sum(dim=-1)
    bound = width * T3_S4 + (2 * width ** 2 - 3 * width) * T3_S2 ** 2
    interval = stats.median_of_means(clipped ** 2, bound, DELTA)

    def record(c3):
        c3.counterexample.check("three-wise independent signs: Var = 4 ≠ 2", True, kind=claims.SYMBOLIC)
        c3.under("minimal conditions").within("t₃: clipped second moment", width * T3_S2, interval)

    assert verdict("C3", record) == expected


# --- C4: an "unscaled" variant that still divides by √d_k shows no saturation ---------------------

@pytest.mark.parametrize("ignores_scale, expected", [(False, claims.HOLDS), (True, claims.NOT_ESTABLISHED)])
def test_c4_entropy_check_catches_an_ignored_scale(gen, ignores_scale, expected):
    samples, m, widths = 6_000, 16, [1, 4, 16, 64]
    entropies = []
    for width in widths:
        query_norm = logit_scale.chi_square(width, samples, generator=gen).sqrt()
        Z = torch.randn(samples, m, generator=gen, dtype=torch.float64)
        scale = 1 / math.sqrt(width) if ignores_scale else 1.0          # the bug: scale=1 not honoured
        weights = attnref.scaled_dot_product_attention(query_norm[:, None, None], Z[:, :, None],
                                                       torch.zeros(samples, m, 1, dtype=torch.float64), scale=scale).weights[:, 0]
        entropies.append(stats.empirical_bernstein_mean(logit_scale.attention_entropy(weights), 0.0, math.log(m), DELTA))
    falls = all(later.high < earlier.low for earlier, later in zip(entropies, entropies[1:]))
    record = lambda c4: c4.check("unscaled entropy falls at every step", falls, kind=claims.STATISTICAL,
                                 bound="empirical Bernstein", failure_probability=4 * DELTA)
    assert verdict("C4", record) == expected


# --- C5: strength applied as a temperature (1/β) misses the bound --------------------------------

@pytest.mark.parametrize("inverted, expected", [(False, claims.HOLDS), (True, claims.NOT_ESTABLISHED)])
def test_c5_bound_check_catches_an_inverted_strength(gen, inverted, expected):
    error = 0.0
    for m in (2, 8, 64):
        for strength in (2.0, 4.0):
            query = torch.randn(1, 8, generator=gen, dtype=torch.float64)
            keys = torch.cat([query, -query.expand(m - 1, 8)])
            beta = 1 / strength if inverted else strength
            weights = attnref.cosine_attention(query, keys, torch.zeros(m, 1, dtype=torch.float64), beta=beta).weights
            error = max(error, abs(weights[0, 0].item() - logit_scale.cosine_max_weight_bound(m, strength)))
    record = lambda c5: c5.at_most("worst case attains the bound", error, 1e-12, kind=claims.NUMERICAL)
    assert verdict("C5", record) == expected


# --- C6: a LayerNorm with the unbiased variance breaks ‖LN(x)‖ = √(d r) --------------------------

@pytest.mark.parametrize("unbiased, expected", [(False, claims.CONDITIONS), (True, claims.NOT_ESTABLISHED)])
def test_c6_norm_check_catches_an_unbiased_variance(gen, unbiased, expected):
    d, eps = 32, 1e-5
    x = 3 * torch.randn(16, d, generator=gen, dtype=torch.float64) + 1.0
    variance = x.var(dim=-1, unbiased=unbiased, keepdim=True)
    y = (x - x.mean(dim=-1, keepdim=True)) / (variance + eps).sqrt()
    biased = x.var(dim=-1, unbiased=False)
    error = (y.norm(dim=-1) - (d * biased / (biased + eps)).sqrt()).abs().max()

    def record(c6):
        c6.counterexample.check("a bias changes the norms", True, kind=claims.SYMBOLIC)
        c6.under("no affine part").at_most("‖LN(x)‖ = √(d r)", error, 1e-12, kind=claims.NUMERICAL)

    assert verdict("C6", record) == expected


# --- C7: "cosine" attention on unnormalised keys lets the key norm act ----------------------------

@pytest.mark.parametrize("cosine_attention, expected", [(attnref.cosine_attention, claims.HOLDS),
                                                        (cosine_attention_unnormalised_keys, claims.NOT_ESTABLISHED)])
def test_c7_norm_check_catches_unnormalised_keys(gen, cosine_attention, expected):
    queries = torch.randn(50, 16, generator=gen, dtype=torch.float64)
    keys = torch.randn(8, 16, generator=gen, dtype=torch.float64)
    weights = []
    for radius in (0.25, 1.0, 8.0):
        scaled = keys.clone()
        scaled[0] = radius * keys[0] / keys[0].norm()
        weights.append(cosine_attention(queries, scaled, torch.zeros(8, 1, dtype=torch.float64)).weights)
    change = max((w - weights[0]).abs().max().item() for w in weights)
    record = lambda c7: c7.at_most("cosine weights ignore the key norm", change, 1e-12, kind=claims.NUMERICAL)
    assert verdict("C7", record) == expected


# --- C8: logits scaled by 1/d_k instead of 1/√d_k fail the independent regime --------------------

@pytest.mark.parametrize("power, expected", [(0.5, claims.CONDITIONS), (1.0, claims.NOT_ESTABLISHED)])
def test_c8_independent_check_catches_the_wrong_power(gen, power, expected):
    samples = 20_000
    inside = True
    for width in (4, 64):
        q = torch.randn(samples, width, generator=gen, dtype=torch.float64)
        k = torch.randn(samples, width, generator=gen, dtype=torch.float64)
        z = (q * k).sum(dim=-1) / width ** power
        inside &= stats.median_of_means(z ** 2, 2 + 6 / width, DELTA).contains(1.0)   # Var[(q·k)²]/d_k²

    def record(c8):
        c8.counterexample.check("k = q: slope 1/2", True, kind=claims.SYMBOLIC)
        c8.under("independent").check("E[(q·k/√d_k)²] = 1", inside, kind=claims.STATISTICAL,
                                      bound="median of means", failure_probability=2 * DELTA)

    assert verdict("C8", record) == expected
