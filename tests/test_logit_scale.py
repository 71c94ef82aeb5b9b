"""attnref.analysis.logit_scale: standardised components, entropy, softmax Jacobian, the cosine bound, slopes."""

from __future__ import annotations

import math

import pytest
import torch

import attnref
from attnref.analysis import logit_scale, stats

from conftest import PARITY_ATOL, randn


# --- standardised_components -------------------------------------------------------------------

@pytest.mark.parametrize("distribution", logit_scale.DISTRIBUTIONS)
def test_components_have_mean_zero_and_variance_one(gen, distribution):
    samples = logit_scale.standardised_components(distribution, 20_000, generator=gen)
    assert samples.dtype == torch.float64 and samples.shape == (20_000,)
    assert stats.mean_estimate(samples).contains(0.0)
    # E[x²] = 1 (the mean is known to be 0). For ±1 samples x² = 1 exactly, so test it exactly:
    # the delta-method band of a sample variance has zero width there.
    second = samples ** 2
    if distribution == "rademacher":
        assert torch.equal(second, torch.ones_like(second))
    else:
        assert stats.mean_estimate(second).contains(1.0)


def test_components_have_their_support(gen):
    uniform = logit_scale.standardised_components("uniform", 1000, generator=gen)
    assert uniform.abs().max() <= math.sqrt(3)
    rademacher = logit_scale.standardised_components("rademacher", 4, 250, generator=gen)
    assert rademacher.shape == (4, 250)
    assert set(rademacher.unique().tolist()) == {-1.0, 1.0}


def test_components_fourth_moments_differ(gen):
    fourth = {dist: stats.mean_estimate(logit_scale.standardised_components(dist, 20_000, generator=gen) ** 4)
              for dist in logit_scale.DISTRIBUTIONS}
    assert fourth["gaussian"].contains(3.0)
    assert fourth["uniform"].contains(9 / 5)
    assert fourth["rademacher"].value == pytest.approx(1.0, abs=1e-15)


def test_components_reject_an_unknown_distribution(gen):
    with pytest.raises(ValueError, match=r"distribution must be one of \('gaussian', 'uniform', 'rademacher', 'student-t3'\), got 'cauchy'"):
        logit_scale.standardised_components("cauchy", 3, generator=gen)


def test_components_reject_a_bad_shape(gen):
    with pytest.raises(ValueError, match=r"shape\[1\] must be a positive int, got 0"):
        logit_scale.standardised_components("gaussian", 3, 0, generator=gen)
    with pytest.raises(ValueError, match=r"shape must name at least one dimension"):
        logit_scale.standardised_components("gaussian", generator=gen)


def test_components_reject_a_missing_generator():
    with pytest.raises(ValueError, match="generator must be a torch.Generator, got int"):
        logit_scale.standardised_components("gaussian", 3, generator=0)


# --- attention_entropy -------------------------------------------------------------------------

def test_entropy_of_uniform_and_one_hot_rows():
    m = 7
    uniform = torch.full((m,), 1 / m, dtype=torch.float64)
    one_hot = torch.zeros(m, dtype=torch.float64)
    one_hot[3] = 1.0
    assert logit_scale.attention_entropy(uniform).item() == pytest.approx(math.log(m), abs=1e-14)
    assert logit_scale.attention_entropy(one_hot).item() == 0.0


def test_entropy_matches_torch_categorical(gen):
    weights = attnref.softmax(randn(gen, 3, 4, 6))                     # (3, 4, 6)
    entropy = logit_scale.attention_entropy(weights)
    assert entropy.shape == (3, 4)
    reference = torch.distributions.Categorical(probs=weights).entropy()
    assert (entropy - reference).abs().max() < PARITY_ATOL


def test_entropy_is_in_nats_not_bits(gen):
    # against torch (nats) and log m for uniform rows, for several m: a log₂ would be off by 1/ln 2
    for m in (2, 5, 64):
        uniform = torch.full((3, m), 1 / m, dtype=torch.float64)
        assert (logit_scale.attention_entropy(uniform) - math.log(m)).abs().max() < 1e-14
    weights = attnref.softmax(randn(gen, 50, 9) * 3)
    reference = torch.distributions.Categorical(probs=weights).entropy()
    assert (logit_scale.attention_entropy(weights) - reference).abs().max() < 1e-13
    assert (logit_scale.attention_entropy(weights) / math.log(2) - reference).abs().max() > 0.1


def test_entropy_of_a_fully_masked_row_is_zero():
    weights = torch.tensor([[0.5, 0.5], [0.0, 0.0]], dtype=torch.float64)
    assert logit_scale.attention_entropy(weights).tolist() == pytest.approx([math.log(2), 0.0])


def test_entropy_rejects_negative_weights():
    with pytest.raises(ValueError, match=r"weights of shape \(3,\) have negative entries"):
        logit_scale.attention_entropy(torch.tensor([1.5, -0.25, -0.25], dtype=torch.float64))


def test_entropy_rejects_rows_that_do_not_sum_to_one():
    with pytest.raises(ValueError, match=r"every row of weights \(shape \(2, 2\)\) must sum to 1"):
        logit_scale.attention_entropy(torch.tensor([[0.5, 0.5], [0.5, 0.4]], dtype=torch.float64))


def test_entropy_rejects_integer_weights():
    with pytest.raises(ValueError, match="weights must have a floating dtype"):
        logit_scale.attention_entropy(torch.tensor([1, 0]))


# --- softmax_jacobian --------------------------------------------------------------------------

def test_jacobian_matches_autograd(gen):
    logits = randn(gen, 5)
    jacobian = logit_scale.softmax_jacobian(attnref.softmax(logits))
    reference = torch.autograd.functional.jacobian(lambda z: torch.softmax(z, dim=-1), logits)
    assert (jacobian - reference).abs().max() < PARITY_ATOL


def test_jacobian_is_batched_symmetric_and_has_zero_row_sums(gen):
    weights = attnref.softmax(randn(gen, 2, 3, 4))
    jacobian = logit_scale.softmax_jacobian(weights)
    assert jacobian.shape == (2, 3, 4, 4)
    assert (jacobian - jacobian.transpose(-2, -1)).abs().max() == 0
    assert jacobian.sum(dim=-1).abs().max() < PARITY_ATOL       # softmax ignores a common shift


def test_jacobian_of_a_one_hot_row_is_zero():
    one_hot = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)
    assert logit_scale.softmax_jacobian(one_hot).abs().max() == 0


def test_jacobian_rejects_non_probabilities():
    with pytest.raises(ValueError, match="must sum to 1"):
        logit_scale.softmax_jacobian(torch.tensor([0.2, 0.2], dtype=torch.float64))
    with pytest.raises(ValueError, match="weights contains NaN"):
        logit_scale.softmax_jacobian(torch.tensor([float("nan"), 1.0], dtype=torch.float64))


# --- cosine_max_weight_bound -------------------------------------------------------------------

@pytest.mark.parametrize("beta", [0.0, 1.0, 3.5])
def test_bound_is_attained_by_one_aligned_and_the_rest_anti_aligned_keys(gen, beta):
    m, d = 6, 4
    query = randn(gen, 1, d)
    keys = torch.cat([2.0 * query, -0.5 * query.expand(m - 1, d)])          # (m, d)
    weights = attnref.cosine_attention(query, keys, randn(gen, m, 3), beta=beta).weights
    bound = logit_scale.cosine_max_weight_bound(m, beta)
    assert abs(weights[0, 0].item() - bound) < PARITY_ATOL
    assert bound == pytest.approx(math.exp(2 * beta) / (math.exp(2 * beta) + m - 1), rel=1e-14)


def test_bound_limits():
    assert logit_scale.cosine_max_weight_bound(1) == 1.0
    assert logit_scale.cosine_max_weight_bound(5, 0.0) == pytest.approx(1 / 5, rel=1e-15)
    assert logit_scale.cosine_max_weight_bound(10, 1000.0) == 1.0       # no overflow


def test_bound_rejects_bad_input():
    with pytest.raises(ValueError, match="m must be a positive int, got 0"):
        logit_scale.cosine_max_weight_bound(0)
    with pytest.raises(ValueError, match=r"beta must be ≥ 0, got -1.0"):
        logit_scale.cosine_max_weight_bound(3, -1.0)
    with pytest.raises(ValueError, match="beta must be finite, got inf"):
        logit_scale.cosine_max_weight_bound(3, math.inf)


# --- Student t₃, the sphere, χ² draws ----------------------------------------------------------

def test_student_t3_has_its_cdf_and_unit_scale(gen):
    samples = logit_scale.standardised_components(logit_scale.STUDENT_T3, 40_000, generator=gen)
    distance, epsilon = stats.dkw_distance(samples, logit_scale.student_t3_cdf)
    assert distance <= epsilon
    # E[min(x², 4)] is bounded: Hoeffding; exact value from the closed forms (2/π)((1+a²)atan a − a)/(1+a²) + a² P(|x|>a), a = 2.
    a = 2.0
    exact = (2 / math.pi) * ((1 + a * a) * math.atan(a) - a) / (1 + a * a) \
        + a * a * (1 - (2 / math.pi) * ((1 + a * a) * math.atan(a) + a) / (1 + a * a))
    assert stats.hoeffding_mean((samples ** 2).clamp(max=a * a), 0.0, a * a).contains(exact)


def test_student_t3_cdf_is_the_integral_of_torchs_t3_density():
    x = torch.linspace(-20, 20, 40_001, dtype=torch.float64)
    # torch's Student t with 3 degrees of freedom, rescaled to unit variance: 2/(π(1 + x²)²).
    density = torch.distributions.StudentT(3.0).log_prob(x * math.sqrt(3.0)).exp() * math.sqrt(3.0)
    assert ((density - 2 / (math.pi * (1 + x * x) ** 2)) / density).abs().max() < 1e-7   # torch: lgamma
    cdf = logit_scale.student_t3_cdf(x)
    assert logit_scale.student_t3_cdf(torch.tensor(0.0)).item() == 0.5
    increments = torch.cumulative_trapezoid(density, x)                 # ∫ density from −20 (error < 1e-7)
    assert (cdf[1:] - cdf[0] - increments).abs().max() < 1e-6


def test_sphere_vectors_have_identity_second_moments_but_dependent_components(gen):
    q = logit_scale.sphere_vectors(50_000, 4, generator=gen)
    assert q.shape == (50_000, 4)
    assert (q.pow(2).sum(-1) - 4).abs().max() < 1e-12                   # radius √d
    second = (q[:, :, None] * q[:, None, :]).mean(0)                    # ≈ I
    assert (second - torch.eye(4, dtype=torch.float64)).abs().max() < 0.05
    pair = (q[:, 0] ** 2 * q[:, 1] ** 2)                                # E = d/(d + 2) = 2/3, in [0, 4]
    assert stats.hoeffding_mean(pair, 0.0, 4.0).contains(2 / 3)


def test_chi_square_draws_have_mean_dof_and_are_seeded(gen):
    draws = logit_scale.chi_square(7, 20_000, generator=gen)
    assert stats.median_of_means(draws, 14.0).contains(7.0)            # Var χ²_7 = 14
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(logit_scale.chi_square(5, 3, 2, generator=g1), logit_scale.chi_square(5, 3, 2, generator=g2))
    with pytest.raises(ValueError, match="dof must be a positive int, got 0"):
        logit_scale.chi_square(0, 3, generator=gen)
    with pytest.raises(ValueError, match="shape must name at least one dimension"):
        logit_scale.chi_square(3, generator=gen)


# --- softmax_jacobian_norm, top_two_gap_density --------------------------------------------------

def test_jacobian_norm_matches_the_matrix(gen):
    weights = attnref.softmax(3 * randn(gen, 4, 5, 9))
    reference = logit_scale.softmax_jacobian(weights).norm(dim=(-2, -1))
    assert (logit_scale.softmax_jacobian_norm(weights) - reference).abs().max() < PARITY_ATOL
    one_hot = torch.tensor([0.0, 1.0, 0.0], dtype=torch.float64)
    assert logit_scale.softmax_jacobian_norm(one_hot).item() == 0.0


def test_gap_density_of_two_normals_and_by_simulation(gen):
    # m = 2: the gap |Z_1 − Z_2| is half-normal with scale √2, density 1/√π at 0.
    assert logit_scale.top_two_gap_density(2) == pytest.approx(1 / math.sqrt(math.pi), rel=1e-9)
    g = 0.7
    assert logit_scale.top_two_gap_density(2, g) == pytest.approx(math.exp(-g * g / 4) / math.sqrt(math.pi), rel=1e-9)
    # m = 16: P(G ≤ h) ≈ f(0) h for small h, with the density integrated over [0, h] on a grid.
    top2 = torch.randn(400_000, 16, generator=gen, dtype=torch.float64).topk(2, dim=-1).values
    gaps = top2[:, 0] - top2[:, 1]
    h = 0.1
    grid = [logit_scale.top_two_gap_density(16, x) for x in (0.0, 0.025, 0.05, 0.075, 0.1)]
    mass = h / 4 * (grid[0] / 2 + sum(grid[1:-1]) + grid[-1] / 2)
    assert stats.hoeffding_mean((gaps <= h).double(), 0.0, 1.0).contains(mass)
    with pytest.raises(ValueError, match="m ≥ 2"):
        logit_scale.top_two_gap_density(1)


# --- clt_variance_misses, loglog_slope_interval ----------------------------------------------------

def test_clt_variance_misses_agrees_with_stats(gen):
    samples = randn(gen, 30, 50) * 2
    misses = logit_scale.clt_variance_misses(samples, 4.0, 0.05)
    expected = [not stats.clt_variance(row, 0.05).contains(4.0) for row in samples]
    assert misses.tolist() == expected


def test_slope_interval_from_intervals():
    x = [1.0, 4.0, 16.0]
    intervals = [stats.Interval(xi ** 0.5, 0.9 * xi ** 0.5, 1.1 * xi ** 0.5, "median of means", 1e-7, 100) for xi in x]
    slope = logit_scale.loglog_slope_interval(x, intervals)
    assert slope.estimate == pytest.approx(0.5, abs=1e-12)
    assert slope.failure_probability == pytest.approx(3e-7) and slope.bound == "median of means"
    for corner in ([0.9, 1.1, 0.9], [1.1, 0.9, 1.1], [0.9, 1.0, 1.1], [1.1, 1.0, 0.9]):
        y = torch.tensor([c * xi ** 0.5 for c, xi in zip(corner, x)], dtype=torch.float64)
        assert slope.low - 1e-12 <= stats.loglog_slope(torch.tensor(x, dtype=torch.float64), y) <= slope.high + 1e-12
    with pytest.raises(ValueError, match="share one bound type"):
        logit_scale.loglog_slope_interval(x[:2], [intervals[0], stats.Interval(2.0, 1.0, 3.0, "Hoeffding", 1e-7, 10)])


# --- round 3: the gap median, Gemma 2's soft cap, T5's initialisation, hull separation (C4, C9, C10)

def test_gap_median_matches_a_simulation(gen):
    from attnref.analysis import stats

    m = 16
    # 400 000 simulated gaps; the exact order-statistic interval of their median (failure
    # probability 1e-6) must hold the integral's median — and exclude the same integral with one
    # factor Φ too few (Φ^{m−2}: 0.403 instead of 0.365), a bug the chapter's 25 % rate margin passes
    top2 = torch.randn(400_000, m, generator=gen, dtype=torch.float64).topk(2, dim=-1).values
    interval = stats.quantile_interval(top2[:, 0] - top2[:, 1], 0.5, 1e-6)
    assert interval.low <= logit_scale.top_two_gap_median(m) <= interval.high
    x = torch.linspace(-12.0, 16.0, 40001, dtype=torch.float64)
    phi = torch.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    survival = lambda g, power: m * torch.trapezoid(phi * torch.special.ndtr(x - g) ** power, x).item()
    assert survival(interval.low, m - 1) > 0.5 > survival(interval.high, m - 1)     # the integral agrees
    assert survival(interval.high, m - 2) > 0.5                                     # Φ^{m−2}: median above
    # two normals: G = |Z_1 − Z_2| ~ √2 |Z|, median √2 Φ⁻¹(3/4)
    assert logit_scale.top_two_gap_median(2) == pytest.approx(math.sqrt(2) * 0.6744897501960817, rel=1e-6)


def test_soft_cap_is_gemma2s_reference_attention():
    from types import SimpleNamespace

    from transformers.models.gemma2 import modeling_gemma2

    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 2, 5, 8, generator=gen, dtype=torch.float64)       # (batch, heads, n, d_k)
    k = 6 * torch.randn(1, 2, 7, 8, generator=gen, dtype=torch.float64)
    v = torch.randn(1, 2, 7, 3, generator=gen, dtype=torch.float64)
    module = SimpleNamespace(head_dim=8, num_key_value_groups=1, training=False)
    output, weights = modeling_gemma2.eager_attention_forward(module, q, k, v, None, softcap=50.0)
    ours = logit_scale.soft_capped_attention(q, k, v, 50.0)
    torch.testing.assert_close(ours.weights, weights.double(), rtol=0, atol=1e-6)   # transformers: float32 softmax
    torch.testing.assert_close(ours.output.transpose(1, 2), output.double(), rtol=0, atol=1e-6)


def test_soft_cap_properties():
    s = torch.linspace(-1e4, 1e4, 2001, dtype=torch.float64)
    capped = logit_scale.soft_cap(s, 5.0)
    assert capped.abs().max() <= 5.0 and (capped.diff() >= 0).all()
    small = torch.tensor([1e-3], dtype=torch.float64)
    assert logit_scale.soft_cap(small, 5.0).item() == pytest.approx(1e-3 - 1e-9 / 75, rel=1e-12)
    with pytest.raises(ValueError, match="cap"):
        logit_scale.soft_cap(s, 0.0)


def test_t5_init_std_is_transformers_t5_initialisation():
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(0)
    config = T5Config(d_model=256, d_kv=32, num_heads=4, num_layers=1, d_ff=64, vocab_size=16)
    attention = T5EncoderModel(config).encoder.block[0].layer[0].SelfAttention
    std_q, std_k = logit_scale.t5_init_std(256, 32)
    # 256 × 128 entries each: the sample std is within a few per cent of the init std
    assert attention.q.weight.std().item() == pytest.approx(std_q, rel=0.03)
    assert attention.k.weight.std().item() == pytest.approx(std_k, rel=0.03)
    assert std_q / std_k == pytest.approx(32 ** -0.5, rel=1e-12)


def test_hull_separation_finds_the_centre_and_selects_the_corners():
    keys = torch.tensor([[1.0, 1.0], [-1.0, 1.0], [-1.0, -1.0], [1.0, -1.0], [0.1, 0.2]], dtype=torch.float64)
    distances, directions = logit_scale.hull_separation(keys)
    assert distances[4].item() <= 1e-12 and directions[4].abs().max().item() == 0
    assert (distances[:4] > 1).all()
    scores = directions[:4] @ keys.T                    # each corner's direction selects it
    assert torch.equal(scores.argmax(dim=-1), torch.arange(4))
