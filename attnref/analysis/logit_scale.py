r"""The scale of attention logits: random components, saturation measures, the sharpness bound of
cosine attention, and power-law slopes with sampling bounds (chapter 4 of the book).

Shapes use the letters of the package docstring: a row of attention weights ``p`` has ``m``
entries (one per key), ``(..., m)``; a batch of rows is ``(..., n, m)``.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from attnref import _validate as check
from attnref.analysis.stats import Interval

Tensor = torch.Tensor

#: The component distributions of :func:`standardised_components`, each with mean 0 and variance 1.
#: Their fourth moments :math:`E[x^4]` are 3, 9/5 and 1.
DISTRIBUTIONS = ("gaussian", "uniform", "rademacher")

#: A heavy-tailed component law: Student's t with 3 degrees of freedom scaled to unit variance
#: (density :math:`2/(\pi(1 + x^2)^2)`); its fourth moment is infinite.
STUDENT_T3 = "student-t3"

def standardised_components(distribution: str, *shape: int, generator: torch.Generator,
                            dtype: torch.dtype = torch.float64) -> Tensor:
    r"""Independent samples with mean 0 and variance 1, of the given ``shape``.

    * ``"gaussian"``: :math:`x \sim \mathcal N(0, 1)`;
    * ``"uniform"``: :math:`x \sim U(-\sqrt3, \sqrt3)`, variance :math:`(2\sqrt3)^2/12 = 1`;
    * ``"rademacher"``: :math:`x = \pm 1` with probability 1/2 each;
    * ``"student-t3"`` (:data:`STUDENT_T3`): Student's t with 3 degrees of freedom divided by
      :math:`\sqrt 3`, drawn as :math:`Z/\lVert G\rVert` with :math:`Z \sim \mathcal N(0, 1)` and
      :math:`G \sim \mathcal N(0, I_3)` independent (:math:`t_3 = Z/\sqrt{\chi^2_3/3}`); density
      :math:`2/(\pi(1+x^2)^2)`, finite moments only below the third, so its fourth moment is infinite.

    All three are symmetric, so they share their first three moments (0, 1, 0); they differ in the
    fourth (:math:`E[x^4] = 3,\ 9/5,\ 1`). A result that holds for all three does not rest on
    Gaussianity.
    """
    if distribution not in (*DISTRIBUTIONS, STUDENT_T3):
        raise ValueError(f"distribution must be one of {(*DISTRIBUTIONS, STUDENT_T3)}, got {distribution!r}")
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    if not shape:
        raise ValueError("shape must name at least one dimension, got ()")
    for axis, size in enumerate(shape):
        check.positive_int(f"shape[{axis}]", size)
    if distribution == "gaussian":
        return torch.randn(*shape, generator=generator, dtype=dtype)
    if distribution == STUDENT_T3:
        normal = torch.randn(*shape, generator=generator, dtype=dtype)                    # Z
        chi = torch.randn(*shape, 3, generator=generator, dtype=dtype).norm(dim=-1)       # ‖G‖ = √χ²₃
        return normal / chi                                                               # t₃/√3
    if distribution == "uniform":
        unit = torch.rand(*shape, generator=generator, dtype=dtype)     # U(0, 1)
        return math.sqrt(3.0) * (2.0 * unit - 1.0)                      # U(−√3, √3)
    bits = torch.randint(0, 2, shape, generator=generator)              # 0 or 1
    return (2 * bits - 1).to(dtype)                                     # −1 or +1


def attention_entropy(weights: Tensor) -> Tensor:
    r"""Entropy of each row of attention weights, in nats: :math:`H(p) = -\sum_j p_j \log p_j`.

    ``weights (..., m)`` → ``(...)``, with :math:`0 \log 0 = 0`. :math:`H = \log m` for uniform
    weights and :math:`H = 0` for a one-hot (saturated) row.
    """
    check.weight_rows("weights", weights)
    logs = torch.where(weights > 0, weights.log(), torch.zeros_like(weights))   # log p_j, 0 where p_j = 0
    return -(weights * logs).sum(dim=-1)                                        # −Σ_j p_j log p_j


def softmax_jacobian(weights: Tensor) -> Tensor:
    r"""Jacobian of :math:`p = \mathrm{softmax}(z)` with respect to the logits, from the weights :math:`p`:

    .. math:: \frac{\partial p_j}{\partial z_l} = p_j(\delta_{jl} - p_l), \qquad J = \mathrm{diag}(p) - p^\top p

    for a row vector ``p``. ``weights (..., m)`` → ``(..., m, m)``. :math:`J \to 0` as ``p``
    becomes one-hot: a saturated softmax passes no gradient to its logits.
    """
    check.weight_rows("weights", weights)
    diagonal = torch.diag_embed(weights)                          # diag(p): (..., m, m)
    outer = weights[..., :, None] * weights[..., None, :]         # pᵀ p: (..., m, 1) * (..., 1, m) -> (..., m, m)
    return diagonal - outer


def cosine_max_weight_bound(m: int, beta: float = 1.0) -> float:
    r"""The largest weight that cosine attention with strength :math:`\beta \ge 0` can give one of ``m`` keys:

    .. math:: \max p_1 = \frac{e^{2\beta}}{e^{2\beta} + m - 1} = \frac{1}{1 + (m - 1)\,e^{-2\beta}},

    attained when key 1 points along the query (logit :math:`\beta`) and every other key points
    against it (logit :math:`-\beta`). The right-hand form cannot overflow.
    """
    check.positive_int("m", m)
    beta = float(check.real_number("beta", beta, nonnegative=True))
    others = (m - 1) * math.exp(-2.0 * beta)     # (m − 1) e^{−2β}
    return 1.0 / (1.0 + others)


def student_t3_cdf(x: Tensor) -> Tensor:
    r"""CDF of the unit-variance Student :math:`t_3` law of :func:`standardised_components`:
    :math:`F(x) = \tfrac12 + \tfrac1\pi\big(\arctan x + x/(1 + x^2)\big)`."""
    x = torch.as_tensor(x, dtype=torch.float64)
    return 0.5 + (torch.atan(x) + x / (1 + x * x)) / math.pi


def sphere_vectors(count: int, width: int, *, generator: torch.Generator, dtype: torch.dtype = torch.float64) -> Tensor:
    r"""``count`` vectors uniform on the sphere of radius :math:`\sqrt{d}` in :math:`\mathbb R^d`
    (``width`` = d): :math:`\sqrt d\, g/\lVert g\rVert` for Gaussian g. Their components have mean 0 and
    :math:`E[q q^\top] = I`, but are not independent (:math:`\sum_i q_i^2 = d` exactly)."""
    check.positive_int("count", count)
    check.positive_int("width", width)
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    g = torch.randn(count, width, generator=generator, dtype=dtype)                  # (count, d)
    return math.sqrt(width) * g / g.norm(dim=-1, keepdim=True)


def softmax_jacobian_norm(weights: Tensor) -> Tensor:
    r"""Frobenius norm of the softmax Jacobian :math:`J = \mathrm{diag}(p) - p^\top p` without forming it:

    .. math:: \lVert J\rVert_F^2 = \sum_j p_j^2 - 2\sum_j p_j^3 + \Big(\sum_j p_j^2\Big)^2 .

    ``weights (..., m)`` → ``(...)``; equals ``softmax_jacobian(weights).norm(dim=(-2, -1))``.
    """
    check.weight_rows("weights", weights)
    second = (weights ** 2).sum(dim=-1)                     # Σ p_j²
    third = (weights ** 3).sum(dim=-1)                      # Σ p_j³
    return (second - 2 * third + second ** 2).clamp(min=0).sqrt()


def top_two_gap_density(m: int, gap: float = 0.0, points: int = 40001) -> float:
    r"""Density at ``gap`` ≥ 0 of :math:`G = Z_{(1)} - Z_{(2)}`, the gap between the two largest of ``m``
    i.i.d. standard normal draws:

    .. math:: f_G(g) = m(m-1)\int \varphi(x)\,\varphi(x - g)\,\Phi(x - g)^{m-2}\,dx

    (the largest at x, the second at x − g, the other m − 2 below it), by the trapezoid rule on
    [−12, 12 + g] in float64 (error far below 1e−9). :math:`f_G(0)` sets the mean softmax Jacobian of
    large unscaled logits (chapter 4, C4)."""
    check.positive_int("m", m)
    if m < 2:
        raise ValueError(f"a gap between the two largest needs m ≥ 2, got {m}")
    gap = float(check.real_number("gap", gap, nonnegative=True))
    x = torch.linspace(-12.0, 12.0 + gap, points, dtype=torch.float64)
    phi = torch.exp(-x * x / 2) / math.sqrt(2 * math.pi)                     # φ(x)
    shifted = x - gap
    phi_shifted = torch.exp(-shifted * shifted / 2) / math.sqrt(2 * math.pi)  # φ(x − g)
    integrand = phi * phi_shifted * torch.special.ndtr(shifted) ** (m - 2)
    return m * (m - 1) * torch.trapezoid(integrand, x).item()


def clt_variance_misses(samples: Tensor, target: float, failure_probability: float = 1e-7) -> Tensor:
    r"""For each row of ``samples (R, N)``: does the asymptotic CLT band of the sample variance
    (:func:`attnref.analysis.stats.clt_variance`, nominal failure probability ``failure_probability``)
    miss ``target``? Returns a bool tensor ``(R,)``; vectorised, same formula."""
    from attnref.analysis.stats import normal_quantile

    check.floating("samples", samples, min_dim=2)
    if samples.dim() != 2 or samples.shape[1] < 4:
        raise ValueError(f"samples must be (R, N) with N ≥ 4, got {check.shape_of(samples)}")
    x = samples.double()
    n = x.shape[1]
    centred = x - x.mean(dim=1, keepdim=True)
    variance = (centred ** 2).sum(dim=1) / (n - 1)                             # s²: (R,)
    fourth = (centred ** 4).mean(dim=1)                                        # μ̂₄: (R,)
    spread = (fourth - variance ** 2 * (n - 3) / (n - 1)).clamp(min=0)         # N·Var(s²), plug-in
    half = normal_quantile(failure_probability) * (spread / n).sqrt()
    return (variance - target).abs() > half


def loglog_slope_interval(x: Sequence[float] | Tensor, intervals: Sequence[Interval], power: float = 1.0) -> Interval:
    r"""Least-squares slope of :math:`\log y` against :math:`\log x` for :math:`y_i` = ``estimate``:sup:`power`
    of each :class:`~attnref.analysis.stats.Interval`, with the interval of slopes that the points'
    intervals allow (the slope is linear in the :math:`\log y_i`). It holds whenever every
    point's interval holds, so its failure probability is at most the sum of theirs (union bound);
    its bound is theirs."""
    intervals = list(intervals)
    if not intervals or not all(isinstance(i, Interval) for i in intervals):
        raise ValueError("intervals must be attnref.analysis.stats.Interval objects")
    if min(i.low for i in intervals) <= 0 or min(i.estimate for i in intervals) <= 0:
        raise ValueError(f"every interval must lie above 0 for a log–log slope, got lows {[i.low for i in intervals]}")
    x = torch.as_tensor(x, dtype=torch.float64)
    if x.dim() != 1 or x.numel() < 2 or x.numel() != len(intervals):
        raise ValueError(f"x must be 1-D with one entry per interval (at least 2), got x of shape "
                         f"{tuple(x.shape)} and {len(intervals)} intervals")
    if (x <= 0).any():
        raise ValueError("x must be positive for a log–log slope")
    if not math.isfinite(power) or power <= 0:
        raise ValueError(f"power must be a finite number > 0, got {power!r}")
    log_y = torch.tensor([power * math.log(i.estimate) for i in intervals], dtype=torch.float64)
    log_low = torch.tensor([power * math.log(i.low) for i in intervals], dtype=torch.float64)
    log_high = torch.tensor([power * math.log(i.high) for i in intervals], dtype=torch.float64)
    centred = x.log() - x.log().mean()
    w = centred / (centred ** 2).sum()                          # the slope is Σ w_i log y_i
    slope = (w * log_y).sum().item()
    # The true slope is Σ w_i log θ_i with each log θ_i in [log low_i, log high_i]: its extremes.
    high = (torch.where(w > 0, log_high, log_low) * w).sum().item()
    low = (torch.where(w > 0, log_low, log_high) * w).sum().item()
    probability = min(sum(i.failure_probability for i in intervals), 1.0)
    bounds = {i.bound for i in intervals}
    if len(bounds) != 1:
        raise ValueError(f"the intervals must share one bound type, got {sorted(bounds)}")
    return Interval(slope, low, high, bounds.pop(), probability, min(i.samples for i in intervals))


def chi_square(dof: int, *shape: int, generator: torch.Generator) -> Tensor:
    r"""Draws of :math:`\chi^2_{\mathrm{dof}}` (``dof`` ≥ 1), e.g. :math:`\lVert q\rVert^2` for a Gaussian
    ``q`` of width ``dof`` without drawing ``dof`` normals. torch's Gamma sampler uses the global
    random state, so it is forked and seeded from ``generator``: the draws are determined by the
    generator's state, like every other draw of the book."""
    check.positive_int("dof", dof)
    if not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    if not shape:
        raise ValueError("shape must name at least one dimension, got ()")
    for axis, size in enumerate(shape):
        check.positive_int(f"shape[{axis}]", size)
    seed = int(torch.randint(0, 2 ** 62, (1,), generator=generator))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        concentration = torch.full(shape, dof / 2.0, dtype=torch.float64)
        return 2.0 * torch.distributions.Gamma(concentration, torch.ones_like(concentration)).sample()


def top_two_gap_median(m: int, points: int = 40001) -> float:
    r"""Median of :math:`G = Z_{(1)} - Z_{(2)}` (see :func:`top_two_gap_density`), from its survival function

    .. math:: P(G > g) = m \int \varphi(x)\,\Phi(x - g)^{m-1}\,dx

    (the largest at x, all m − 1 others below x − g), solved for 1/2 by bisection. Without the
    factor 1/√d_k the median softmax Jacobian of m Gaussian keys decays like
    :math:`e^{-\mathrm{med}(G)\sqrt{d_k}}` (chapter 4, C4)."""
    check.positive_int("m", m)
    if m < 2:
        raise ValueError(f"a gap between the two largest needs m ≥ 2, got {m}")
    x = torch.linspace(-12.0, 16.0, points, dtype=torch.float64)
    phi = torch.exp(-x * x / 2) / math.sqrt(2 * math.pi)                         # φ(x)

    def survival(gap: float) -> float:
        return m * torch.trapezoid(phi * torch.special.ndtr(x - gap) ** (m - 1), x).item()

    low, high = 0.0, 4.0
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if survival(middle) > 0.5 else (low, middle)
    return (low + high) / 2


def soft_cap(scores: Tensor, cap: float) -> Tensor:
    r"""Gemma 2's logit soft-capping (Gemma Team 2024, §2): :math:`c \tanh(s / c)`, elementwise.

    Odd, increasing (derivative :math:`\operatorname{sech}^2(s/c) \in (0, 1]`, so the order of the
    logits is kept), :math:`c\tanh(s/c) = s - s^3/(3c^2) + O(s^5)` near 0, and bounded by ``cap`` in
    absolute value: the logits of a row differ by less than :math:`2c`."""
    check.floating("scores", scores)
    cap = float(check.real_number("cap", cap))
    if cap <= 0:
        raise ValueError(f"cap must be > 0, got {cap!r}")
    return cap * torch.tanh(scores / cap)                     # c tanh(s/c)


def soft_capped_attention(query: Tensor, key: Tensor, value: Tensor, cap: float, scale: float | None = None):
    r"""Dot-product attention with soft-capped logits, as Gemma 2 computes it: scores
    :math:`s = \text{scale}\; q\cdot k_j` (default :math:`1/\sqrt{d_k}`), then :func:`soft_cap`, then the
    softmax. Returns attnref's ``AttentionResult`` (output and weights)."""
    from attnref.attention import attention_from_scores, luong_dot_scores

    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    scores = scale * luong_dot_scores(query, key)             # (..., n, m)
    return attention_from_scores(soft_cap(scores, cap), value)


def t5_init_std(d_model: int, d_kv: int, factor: float = 1.0) -> tuple[float, float]:
    r"""The standard deviations T5 initialises its query and key projections with
    (``T5PreTrainedModel._init_weights`` in transformers, after Mesh TensorFlow):
    :math:`W_Q \sim \mathcal N(0, \text{factor}^2/(d\,d_k))` and :math:`W_K \sim \mathcal N(0, \text{factor}^2/d)`.
    T5 computes unscaled scores :math:`q\cdot k`; the extra :math:`1/\sqrt{d_k}` of the query's
    standard deviation is the factor of scaled dot-product attention, folded into the initialisation."""
    check.positive_int("d_model", d_model)
    check.positive_int("d_kv", d_kv)
    return factor * (d_model * d_kv) ** -0.5, factor * d_model ** -0.5


def hull_separation(keys: Tensor) -> tuple[Tensor, Tensor]:
    r"""For each key, its distance to the convex hull of the *other* keys and a unit query that
    selects it under dot-product scores.

    ``keys (m, d)`` → distances ``(m,)`` and directions ``(m, d)``. A key at distance 0 (up to
    round-off: at most 1e−9 times the largest key norm) lies in the hull of the others (:func:`attnref.analysis.hull.distance_to_hull`, exact up to round-off): its
    score :math:`q\cdot k_j = \sum_l \lambda_l\, q\cdot k_l` never exceeds the largest of the others,
    for any query, and its direction is 0. A key outside has the separating direction
    :math:`u = (k_j - x^*)/\lVert k_j - x^*\rVert` (:math:`x^*` the nearest point of the hull), for which
    :math:`u\cdot k_j > u\cdot k_l` for every other key: the query :math:`u` gives it the largest weight."""
    from attnref.analysis.hull import distance_to_hull

    check.floating("keys", keys, exact_dim=2)
    m = keys.shape[0]
    if m < 2:
        raise ValueError(f"need at least 2 keys, got {m}")
    distances, directions = keys.new_zeros(m), torch.zeros_like(keys)
    scale = float(keys.norm(dim=-1).max())
    for j in range(m):
        others = torch.cat([keys[:j], keys[j + 1:]])                              # (m − 1, d)
        distance, weights = distance_to_hull(keys[j:j + 1], others)
        distances[j] = distance[0]
        if distance[0] > 1e-9 * scale:                                            # outside, beyond round-off
            nearest = weights[0] @ others                                         # x*: (d,)
            directions[j] = (keys[j] - nearest) / (keys[j] - nearest).norm()
    return distances, directions
