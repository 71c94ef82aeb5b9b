r"""What chapter 6 measures on a trained model's weights and activations, for any model.

Nothing here knows which model produced the tensors: a caller passes per-head projection
weights ``(..., h, d, d_k)`` or per-head queries and keys, and gets the statistics the rechecks
of chapter 6 need. The encoder (all-MiniLM-L6-v2) and, later, a decoder use the same functions;
a causal model passes its mask of allowed keys.

Weights (exact numbers, no sampling):

* :func:`fused_spectrum` — the :math:`d_k` singular values of :math:`W = W_Q W_K^\top` that can
  be non-zero, from the :math:`d_k \times d_k` product of the two triangular QR factors;
* :func:`column_rank_margin` — how far a factor's smallest singular value lies above the
  round-off of its SVD (a margin above 1 certifies full column rank of the exact matrix);
* :func:`stable_rank`, :func:`energy_rank` — effective ranks of a spectrum.

Activations, one *row* per (query token, head): a row holds the logits of one query against the
keys it may attend to, padded to a common width with a boolean mask (:func:`pack_rows`).

* :func:`within_row_variance` — the variance of the logits of one row over its keys: the only
  spread a softmax sees (it ignores a shift of the whole row);
* :func:`masked_softmax`, :func:`kl_rows`, :func:`total_variation_rows` — attention maps and
  their distances, row by row;
* :func:`fit_inverse_temperature` — the :math:`\tau` for which :math:`\mathrm{softmax}(\tau c)`
  comes closest (mean KL) to given maps, one for all heads or one per head.

Intervals: the sentences of a text set are resampled with replacement
(:func:`bootstrap_counts`); a statistic that is a ratio of sums over sentences is recomputed
for every resample in one matrix product (:func:`ratio_replicates`), and
:func:`bootstrap_interval` turns the replicates into a normal-approximation interval,
"bootstrap (asymptotic)": estimate ± z·(bootstrap standard deviation), with z the two-sided
normal quantile of the failure probability. It treats the sentences as independent draws
from some population of sentences; it says nothing about text unlike the set.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from attnref import _validate as check
from attnref.analysis import stats
from attnref.analysis.logit_scale import attention_entropy

Tensor = torch.Tensor

BOOTSTRAP = "bootstrap (asymptotic)"


# --- weights ---------------------------------------------------------------------------------

def _factors(w_q: Tensor, w_k: Tensor) -> None:
    check.floating("w_q", w_q, min_dim=2)
    check.floating("w_k", w_k, min_dim=2)
    check.same_dtype(w_q=w_q, w_k=w_k)
    if w_q.shape[-1] != w_k.shape[-1] or w_q.shape[-1] > w_q.shape[-2] or w_k.shape[-1] > w_k.shape[-2]:
        raise ValueError(f"w_q {check.shape_of(w_q)} and w_k {check.shape_of(w_k)} must be (..., d, d_k) "
                         "with the same d_k ≤ d")
    if check.broadcast_shapes(tuple(w_q.shape[:-2]), tuple(w_k.shape[:-2])) is None:
        raise ValueError(f"the head dimensions of w_q {check.shape_of(w_q)} and w_k {check.shape_of(w_k)} "
                         "do not broadcast")


def fused_spectrum(w_q: Tensor, w_k: Tensor) -> Tensor:
    r"""The singular values of :math:`W = W_Q W_K^\top` that can be non-zero, descending.

    With :math:`W_Q = Q_a R_a` and :math:`W_K = Q_b R_b` (thin QR, :math:`Q` with orthonormal
    columns), :math:`W = Q_a (R_a R_b^\top) Q_b^\top`, so the singular values of :math:`W` are
    those of the :math:`d_k \times d_k` matrix :math:`R_a R_b^\top` and :math:`d - d_k` zeros.
    ``w_q, w_k (..., d, d_k)`` (row form, one per head; a shared key head broadcasts) →
    ``(..., d_k)``. Much cheaper than the SVD of the :math:`d \times d` product, and free of
    the round-off tail that SVD would add at indices above :math:`d_k`.
    """
    _factors(w_q, w_k)
    r_a = torch.linalg.qr(w_q, mode="r").R            # (..., d_k, d_k)
    r_b = torch.linalg.qr(w_k, mode="r").R
    return torch.linalg.svdvals(r_a @ r_b.transpose(-2, -1))   # (..., d_k, d_k) -> (..., d_k)


def column_rank_margin(w: Tensor) -> Tensor:
    r"""The smallest singular value of ``w (..., d, d_k)`` in units of the SVD's error bound.

    A backward-stable SVD returns the singular values of :math:`w + E` with
    :math:`\lVert E \rVert_2 \le d\,\varepsilon\,\sigma_1` (:math:`\varepsilon` of the dtype), and
    by Weyl's inequality each computed :math:`\sigma_r` is within :math:`\lVert E \rVert_2` of the
    exact one. A margin :math:`\sigma_{d_k} / (d\,\varepsilon\,\sigma_1) > 1` therefore certifies
    that the *exact* matrix (e.g. float32 weights, exact in float64) has full column rank.
    Returns ``(...)``.
    """
    check.floating("w", w, min_dim=2)
    sigma = torch.linalg.svdvals(w)                                        # (..., d_k), descending
    error = sigma[..., 0] * max(w.shape[-2:]) * torch.finfo(w.dtype).eps   # d ε σ₁
    return sigma[..., -1] / error


def _spectrum(sigma: Tensor) -> Tensor:
    check.floating("sigma", sigma, min_dim=1)
    if (sigma < 0).any():
        raise ValueError(f"sigma (shape {check.shape_of(sigma)}) has negative entries: not singular values")
    if (sigma.amax(-1) == 0).any():
        raise ValueError("a spectrum is all zero: its effective rank is undefined")
    return sigma


def stable_rank(sigma: Tensor) -> Tensor:
    r"""The stable rank :math:`\lVert W \rVert_F^2 / \lVert W \rVert_2^2 = \sum_r \sigma_r^2 / \sigma_1^2`
    (between 1 and the rank); ``sigma (..., r)`` → ``(...)``."""
    sigma = _spectrum(sigma)
    return (sigma ** 2).sum(-1) / sigma.amax(-1) ** 2


def energy_rank(sigma: Tensor, fraction: float) -> Tensor:
    r"""The smallest :math:`r` with :math:`\sum_{s \le r} \sigma_s^2 \ge` ``fraction`` :math:`\cdot \sum_s \sigma_s^2`
    (singular values sorted descending); ``sigma (..., r)`` → ``(...)`` int64."""
    sigma = _spectrum(sigma)
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    energy = (sigma.sort(dim=-1, descending=True).values ** 2).cumsum(-1)   # (..., r)
    total = energy[..., -1:]
    return (energy < fraction * total * (1 - 1e-12)).sum(-1) + 1


# --- activations as rows ---------------------------------------------------------------------

@dataclass(frozen=True)
class Rows:
    """Per-row values ``(h, R, M)``: row ``r`` is one query token, its keys padded to ``M``."""

    values: Tensor      # (h, R, M): a quantity per head, query row and key slot
    mask: Tensor        # (R, M) bool: True for a key the row may attend to
    sentence: Tensor    # (R,) int64: the sentence each row belongs to (for the bootstrap)

    def like(self, values: Tensor) -> "Rows":
        """The same rows with other values of the same shape."""
        if values.shape != self.values.shape:
            raise ValueError(f"values {check.shape_of(values)} must have the rows' shape {check.shape_of(self.values)}")
        return Rows(values, self.mask, self.sentence)


def pack_rows(values: Tensor, key_mask: Tensor, first_sentence: int = 0, width: int | None = None,
              allowed: Tensor | None = None) -> Rows:
    r"""The real query rows of a padded batch, one row per (query token), keys padded to ``width``.

    ``values (b, h, n, n)`` (scores, weights, … of a self-attention batch), ``key_mask (b, n)``
    (True = real token: real query rows are kept, padded keys are masked), ``allowed (n, n)``
    an optional boolean mask of keys a query may see (a causal model: ``j ≤ i``). Sentence
    ``i`` of the batch gets index ``first_sentence + i``. Returns :class:`Rows` with
    ``values (h, R, width)``, padded slots 0.
    """
    check.floating("values", values, exact_dim=4)
    b, h, n, m = values.shape
    if n != m:
        raise ValueError(f"values {check.shape_of(values)} must be (b, h, n, n): self-attention")
    if not isinstance(key_mask, torch.Tensor) or key_mask.dtype != torch.bool or tuple(key_mask.shape) != (b, n):
        raise ValueError(f"key_mask must be a boolean ({b}, {n}) tensor, got "
                         f"{getattr(key_mask, 'dtype', type(key_mask).__name__)} {tuple(getattr(key_mask, 'shape', ()))}")
    width = n if width is None else width
    if width < n:
        raise ValueError(f"width {width} is smaller than the batch's {n} positions")
    keys = key_mask[:, None, :].expand(b, n, n)                        # (b, n, n)
    if allowed is not None:
        if not isinstance(allowed, torch.Tensor) or allowed.dtype != torch.bool or tuple(allowed.shape) != (n, n):
            raise ValueError(f"allowed must be a boolean ({n}, {n}) tensor")
        keys = keys & allowed
    rows = values.permute(1, 0, 2, 3)[:, key_mask]                     # (h, b, n, n) -> (h, R, n)
    mask = keys[key_mask]                                              # (R, n)
    sentence = (torch.arange(b) + first_sentence)[:, None].expand(b, n)[key_mask]   # (R,)
    pad = width - n
    rows = torch.nn.functional.pad(rows, (0, pad)) * torch.nn.functional.pad(mask, (0, pad))
    return Rows(rows, torch.nn.functional.pad(mask, (0, pad)), sentence)


def concat_rows(parts: list[Rows]) -> Rows:
    """Rows of several batches (same ``h`` and width) as one."""
    return Rows(torch.cat([p.values for p in parts], dim=1), torch.cat([p.mask for p in parts]),
                torch.cat([p.sentence for p in parts]))


def within_row_variance(rows: Rows) -> Tensor:
    r"""The variance of each row's values over its allowed keys,
    :math:`\frac1{m_i}\sum_j (s_{ij} - \bar s_i)^2`; ``(h, R)``.

    A softmax ignores a shift of its row, so this — not the variance pooled over rows — is the
    spread of the logits that one softmax sees."""
    weights = rows.mask.to(rows.values.dtype)                           # (R, M)
    count = weights.sum(-1)                                             # m_i: (R,)
    mean = (rows.values * weights).sum(-1) / count                      # s̄_i: (h, R)
    centred = (rows.values - mean[..., None]) * weights                 # (h, R, M)
    return (centred * centred).sum(-1) / count


def masked_softmax(rows: Rows) -> Tensor:
    """Softmax of every row over its allowed keys (masked slots get 0); ``(h, R, M)``."""
    logits = rows.values.masked_fill(~rows.mask, float("-inf"))
    return torch.softmax(logits, dim=-1)


def kl_rows(p: Tensor, r: Tensor) -> Tensor:
    r"""Kullback–Leibler divergence of every row, :math:`\sum_j p_j \log(p_j / r_j)` (terms with
    :math:`p_j = 0` count 0); ``p, r (..., m)`` rows of probabilities → ``(...)``. A key with
    ``p > 0`` and ``r = 0`` raises ``ValueError`` (infinite KL)."""
    check.weight_rows("weights", p)
    check.weight_rows("weights", r)
    check.same_dtype(p=p, r=r)
    if p.shape != r.shape:
        raise ValueError(f"p has shape {check.shape_of(p)} and r has shape {check.shape_of(r)}; they must match")
    if ((p > 0) & (r == 0)).any():
        raise ValueError("r is 0 where p is positive: the KL divergence is infinite")
    ratio = torch.where(p > 0, p / torch.where(r > 0, r, torch.ones_like(r)), torch.ones_like(p))
    return (p * torch.log(ratio)).sum(dim=-1)


def cross_entropy_rows(p: Tensor, rows: Rows) -> Tensor:
    r"""The cross-entropy of every row, :math:`-\sum_j p_j \log r_j` with
    :math:`r = \mathrm{softmax}` of ``rows`` over its allowed keys; ``p (h, R, M)`` → ``(h, R)``.

    The KL divergence is ``cross_entropy_rows(p, rows) − attention_entropy(p)``; through a
    log-softmax it is exact where a weight of :math:`r` underflows. ``p`` must put no weight on
    a masked key (checked by :func:`kl_to_logits`, not here: this is the inner loop)."""
    if p.shape != rows.values.shape:
        raise ValueError(f"p {check.shape_of(p)} and the rows {check.shape_of(rows.values)} must match")
    log_r = torch.log_softmax(rows.values.masked_fill(~rows.mask, float("-inf")), dim=-1)
    return -torch.einsum("hrm,hrm->hr", p, log_r.masked_fill(~rows.mask, 0.0))


def kl_to_logits(p: Tensor, rows: Rows) -> Tensor:
    r"""The KL divergence of every row from ``p (h, R, M)`` to the softmax of ``rows``; ``(h, R)``."""
    check.weight_rows("weights", p)
    if p.shape == rows.values.shape and (p.masked_select(~rows.mask) != 0).any():
        raise ValueError("p puts weight on a masked key")
    return cross_entropy_rows(p, rows) - attention_entropy(p)


def total_variation_rows(p: Tensor, r: Tensor) -> Tensor:
    r"""Total-variation distance of every row, :math:`\tfrac12 \sum_j |p_j - r_j|` ∈ [0, 1]; ``(...)``."""
    check.weight_rows("weights", p)
    check.weight_rows("weights", r)
    check.same_dtype(p=p, r=r)
    if p.shape != r.shape:
        raise ValueError(f"p has shape {check.shape_of(p)} and r has shape {check.shape_of(r)}; they must match")
    return 0.5 * (p - r).abs().sum(dim=-1)


def fit_inverse_temperature(target: Tensor, rows: Rows, per_head: bool = False, start: float | Tensor = 1.0,
                            bounds: tuple[float, float] = (1e-3, 1e4), iterations: int = 60) -> Tensor:
    r"""The :math:`\tau` minimising the mean KL from ``target`` to :math:`\mathrm{softmax}(\tau c)`.

    ``target (h, R, M)`` attention maps, ``rows`` the unit-temperature logits :math:`c` (e.g.
    cosines) with their mask. For one row,

    .. math::
        f(\tau) &= \mathrm{KL}(p \Vert r(\tau)) = \textstyle\sum_j p_j \log p_j - \tau\, \mathbb{E}_p[c] + \log \sum_j e^{\tau c_j} \\
        f'(\tau) &= \mathbb{E}_{r(\tau)}[c] - \mathbb{E}_p[c], \qquad f''(\tau) = \mathrm{Var}_{r(\tau)}[c] \ge 0,

    so the mean over rows is convex in :math:`\tau`: Newton's method on :math:`f'`, safeguarded by
    a bracket that is bisected geometrically whenever a step leaves it. A minimiser outside
    ``bounds`` returns the nearer bound. ``per_head``: one :math:`\tau` per head, ``(h,)``;
    else one for all, ``()``. ``start``: the first guess (a good one saves iterations).
    """
    check.weight_rows("weights", target)
    if target.shape != rows.values.shape:
        raise ValueError(f"target {check.shape_of(target)} and the rows {check.shape_of(rows.values)} must match")
    check.same_dtype(target=target, logits=rows.values)
    low, high = bounds
    if not 0 < low < high:
        raise ValueError(f"bounds must satisfy 0 < low < high, got {bounds}")
    h = target.shape[0]
    c = rows.values.masked_fill(~rows.mask, 0.0)                    # (h, R, M)
    masked = torch.zeros(rows.mask.shape, dtype=c.dtype).masked_fill(~rows.mask, float("-inf"))   # (R, M)
    expected_under_target = torch.einsum("hrm,hrm->hr", target, c)  # E_p[c]: (h, R)
    reduce = (1,) if per_head else (0, 1)
    shape = (h,) if per_head else ()

    c2 = c * c

    def derivatives(tau: Tensor, heads: Tensor | None = None) -> tuple[Tensor, Tensor]:
        # f' and f'' summed over rows (and heads), for the heads still moving (per_head)
        cc, cc2, expected = (c, c2, expected_under_target) if heads is None else (
            c[heads], c2[heads], expected_under_target[heads])
        shaped = tau.reshape(-1, 1, 1) if per_head else tau
        r = torch.softmax(shaped * cc + masked, dim=-1)              # r(τ): (h, R, M)
        mean_r = torch.einsum("hrm,hrm->hr", r, cc)                 # E_r[c]: (h, R)
        var_r = torch.einsum("hrm,hrm->hr", r, cc2) - mean_r * mean_r   # Var_r[c]
        return (mean_r - expected).sum(reduce), var_r.sum(reduce)

    lower = torch.full(shape, low, dtype=target.dtype)
    upper = torch.full(shape, high, dtype=target.dtype)
    tau = torch.as_tensor(start, dtype=target.dtype).expand(shape).clamp(low, high).clone()
    done = torch.zeros(shape, dtype=torch.bool)
    for _ in range(iterations):
        moving = (~done).nonzero()[:, 0] if per_head else None     # converged heads are left out
        first, second = derivatives(tau if moving is None else tau[moving], moving)
        if moving is not None:
            first = torch.zeros(shape, dtype=tau.dtype).index_copy(0, moving, first)
            second = torch.ones(shape, dtype=tau.dtype).index_copy(0, moving, second)
        upper = torch.where(done | (first <= 0), upper, tau)        # f' > 0: the minimiser is below τ
        lower = torch.where(done | (first > 0), lower, tau)
        newton = tau - first / torch.where(second > 0, second, torch.ones_like(second))
        newton = newton.clamp(low, high)                            # a minimiser beyond a bound: the bound
        inside = (second > 0) & (newton >= lower) & (newton <= upper)
        step = torch.where(inside, newton, torch.sqrt(lower * upper))   # Newton, or bisect the bracket
        step = torch.where(done, tau, step)                         # a converged τ stays put
        done = done | ((step - tau).abs() <= 1e-9 * tau)            # Newton: the next step would be ~1e-18
        tau = step
        if bool(done.all()):
            break
    return tau


# --- sums over sentences, and the bootstrap ----------------------------------------------------

def per_sentence(values: Tensor, sentence: Tensor, sentences: int) -> Tensor:
    """Sum ``values (..., R)`` over the rows of each sentence → ``(sentences, ...)``."""
    check.floating("values", values, min_dim=1)
    out = torch.zeros((sentences,) + tuple(values.shape[:-1]), dtype=values.dtype)
    return out.index_add_(0, sentence, values.movedim(-1, 0))


def bootstrap_counts(sentences: int, replicates: int, generator: torch.Generator) -> Tensor:
    """How often each sentence is drawn in each bootstrap resample (``sentences`` draws with
    replacement); ``(replicates, sentences)`` float64, every row summing to ``sentences``."""
    check.positive_int("sentences", sentences)
    check.positive_int("replicates", replicates)
    draws = torch.randint(0, sentences, (replicates, sentences), generator=generator)
    counts = torch.zeros(replicates, sentences, dtype=torch.float64)
    return counts.scatter_add_(1, draws, torch.ones_like(draws, dtype=torch.float64))


def ratio_replicates(counts: Tensor, numerator: Tensor, denominator: Tensor) -> Tensor:
    r"""A ratio of sums over sentences, :math:`\sum_s c_s a_s / \sum_s c_s b_s`, for every resample.

    ``counts (B, S)``, ``numerator, denominator (S, ...)`` → ``(B, ...)``."""
    a = numerator.reshape(numerator.shape[0], -1)
    b = denominator.reshape(denominator.shape[0], -1)
    return ((counts @ a) / (counts @ b)).reshape((counts.shape[0],) + tuple(numerator.shape[1:]))


_SCALES = (None, "log", "logit")


def _forward(values: Tensor, scale: str | None) -> Tensor:
    if scale not in _SCALES:
        raise ValueError(f"scale must be one of {_SCALES}, got {scale!r}")
    values = torch.as_tensor(values, dtype=torch.float64)
    if scale == "log":
        return torch.log(values)                  # a positive quantity: ≤ 0 gives NaN or −∞
    if scale == "logit":
        return torch.log(values) - torch.log1p(-values)   # a proportion in (0, 1)
    return values


def _back(values: Tensor, scale: str | None) -> Tensor:
    if scale == "log":
        return torch.exp(values)
    if scale == "logit":
        return torch.sigmoid(values)
    return values


def bootstrap_interval(estimate: float | Tensor, replicates: Tensor,
                       failure_probability: float = 1e-7, scale: str | None = None) -> stats.Interval:
    r"""Normal-approximation bootstrap interval: estimate ± z·sd(replicates), z the two-sided
    normal quantile of ``failure_probability`` (4.9 for 10⁻⁶, 1.96 for 0.05). Asymptotic: its
    coverage holds as the number of (independent) sentences grows, so its level is nominal.

    ``scale="log"`` (a positive quantity: a variance ratio, a KL, a coefficient of variation) or
    ``"logit"`` (a proportion): the interval is built on that scale and mapped back, so it stays
    positive (inside (0, 1)); a replicate outside the scale's domain makes the interval NaN.
    The interval's ``standard_error`` is sd(replicates) carried back to the quantity's scale (delta
    method), for the margins of exclusion checks (``claims.beyond``)."""
    r = _forward(replicates.double().flatten(), scale)
    if r.numel() < 2:
        raise ValueError("need at least 2 bootstrap replicates")
    z = stats.normal_quantile(failure_probability)
    centre = _forward(torch.as_tensor(float(estimate), dtype=torch.float64), scale)
    spread = r.std(unbiased=True)
    half = z * spread
    low, high = (float(_back(centre + sign * half, scale)) for sign in (-1, 1))
    # the standard error on the quantity's own scale (delta method: d back / d centre · sd)
    value = float(estimate)
    slope = {None: 1.0, "log": abs(value), "logit": value * (1 - value)}[scale]
    return stats.Interval(value, low, high, BOOTSTRAP, failure_probability, r.numel(), float(spread) * slope)


def bootstrap_band(estimate: Tensor, replicates: Tensor, failure_probability: float = 0.05,
                   scale: str | None = None) -> tuple[Tensor, Tensor]:
    """The same interval element-wise: ``estimate (...)``, ``replicates (B, ...)`` → ``(low, high)``."""
    z = stats.normal_quantile(failure_probability)
    half = z * _forward(replicates.double(), scale).std(dim=0, unbiased=True)
    centre = _forward(estimate.double(), scale)
    return _back(centre - half, scale), _back(centre + half, scale)


def cross_sentence_replicates(counts: Tensor, block_sums: Tensor, block_pairs: Tensor) -> Tensor:
    r"""A mean over pairs of tokens from *different* sentences, for every resample.

    ``block_sums (S, S, ...)``: the sum of a pair statistic (a cosine, its square) over the
    tokens of sentence ``s`` against those of sentence ``t``; ``block_pairs (S, S)``: how many
    pairs that is (:math:`n_s n_t`). With ``counts (B, S)`` (each resample's draws of each
    sentence) the resample's mean over pairs of distinct draws of distinct sentences is

    .. math:: \frac{\sum_{s \ne t} c_s c_t K_{st}}{\sum_{s \ne t} c_s c_t N_{st}}

    (a sentence drawn twice is not paired with itself). ``counts`` of ones give the estimate.
    Returns ``(B, ...)``."""
    S = block_pairs.shape[0]
    if block_sums.shape[:2] != (S, S) or tuple(counts.shape[-1:]) != (S,):
        raise ValueError(f"block_sums {check.shape_of(block_sums)}, block_pairs {check.shape_of(block_pairs)} "
                         f"and counts {check.shape_of(counts)} do not agree on the number of sentences")
    off = 1 - torch.eye(S, dtype=torch.float64)
    k = block_sums.double() * off.reshape((S, S) + (1,) * (block_sums.dim() - 2))
    c = counts.double()
    numerator = torch.einsum("bs,st...,bt->b...", c, k, c)
    denominator = torch.einsum("bs,st,bt->b", c, block_pairs.double() * off, c)
    return numerator / denominator.reshape((-1,) + (1,) * (numerator.dim() - 1))


def temperature_derivatives(target: Tensor, rows: Rows, tau: Tensor) -> tuple[Tensor, Tensor]:
    r"""Per row, the first and second derivatives in :math:`\tau` of
    :math:`\mathrm{KL}(p \Vert \mathrm{softmax}(\tau c))`: :math:`E_{r(\tau)}[c] - E_p[c]` and
    :math:`\mathrm{Var}_{r(\tau)}[c]`, at one :math:`\tau` per head ``(h,)``; each ``(h, R)``.
    Summed over a resample's sentences they give one Newton step of that resample's own fit
    (:func:`refitted_kl_replicates`)."""
    check.weight_rows("weights", target)
    if target.shape != rows.values.shape:
        raise ValueError(f"target {check.shape_of(target)} and the rows {check.shape_of(rows.values)} must match")
    c = rows.values.masked_fill(~rows.mask, 0.0)
    masked = torch.zeros(rows.mask.shape, dtype=c.dtype).masked_fill(~rows.mask, float("-inf"))
    r = torch.softmax(tau.reshape(-1, 1, 1) * c + masked, dim=-1)
    mean_r = torch.einsum("hrm,hrm->hr", r, c)
    var_r = torch.einsum("hrm,hrm->hr", r, c * c) - mean_r * mean_r
    return mean_r - torch.einsum("hrm,hrm->hr", target, c), var_r


def refitted_kl_replicates(counts: Tensor, kl: Tensor, first: Tensor, second: Tensor,
                           rows: Tensor) -> Tensor:
    r"""The mean KL after refitting one temperature per head on every resample.

    ``kl, first, second (S, h)``: per sentence and head, the sums over its rows of the KL at the
    full-sample fit :math:`\tau^*` and of its two derivatives (:func:`temperature_derivatives`);
    ``rows (S,)`` the rows per sentence. The resample's KL, :math:`f_b(\tau)`, is convex; at
    :math:`\tau^*` its slope is :math:`g_b = \sum_s c_s f'_s` (zero on the full sample) and its
    curvature :math:`H_b`, so its minimum is :math:`f_b(\tau^*) - g_b^2 / (2 H_b)` to second order
    (one Newton step of the refit). Returns the mean over heads and rows, ``(B,)``: a fit held
    fixed inside the bootstrap would leave the term :math:`-g_b^2/(2H_b)` out, and the interval
    would miss the fit's own variability."""
    c = counts.double()
    f = c @ kl.double()                                         # (B, h)
    g = c @ first.double()
    hess = c @ second.double()
    refit = f - 0.5 * g * g / hess
    return refit.sum(-1) / (c @ rows.double() * kl.shape[-1])


def coefficient_of_variation(total: Tensor, total_squares: Tensor, count: Tensor) -> Tensor:
    r"""The coefficient of variation :math:`\sqrt{\overline{x^2} - \bar x^2} / \bar x` from sums
    (element-wise; the sums may be bootstrap replicates)."""
    mean = total / count
    return (total_squares / count - mean * mean).clamp_min(0).sqrt() / mean


def dot_cosine_deviation(dots_cosines: Tensor, cosines_squared: Tensor, dots_squared: Tensor) -> Tensor:
    r"""How far dot products are from a multiple of the cosines, from sums over pairs:
    :math:`\min_c \lVert D - c\,C \rVert / \lVert D \rVert = \sqrt{1 - \langle D, C\rangle^2 / (\lVert C\rVert^2 \lVert D\rVert^2)}`
    (0 when every vector has the same norm)."""
    return (1 - dots_cosines ** 2 / (cosines_squared * dots_squared)).clamp_min(0).sqrt()


def pair_sums(x: Tensor, allowed: Tensor) -> Tensor:
    r"""Sums over the allowed pairs of rows of ``x (n, d)``: :math:`\sum D C`, :math:`\sum C^2`,
    :math:`\sum D^2` with :math:`D_{ij} = x_i \cdot x_j`, :math:`C_{ij} = \cos(x_i, x_j)`;
    ``allowed (n, n)`` bool → ``(3,)`` (the inputs of :func:`dot_cosine_deviation`)."""
    check.floating("x", x, exact_dim=2)
    dots = x @ x.T                                     # (n, d) @ (d, n) -> (n, n)
    norms = x.norm(dim=-1)
    cosines = dots / (norms[:, None] * norms[None, :])
    d, c = dots[allowed], cosines[allowed]
    return torch.stack([(d * c).sum(), (c * c).sum(), (d * d).sum()])


def mean_squared_correlation(sums: Tensor, moments: Tensor, count: Tensor) -> Tensor:
    r"""The mean squared correlation between two different components of a set of vectors, from
    sums: ``sums (..., d)`` :math:`\sum_j k_j`, ``moments (..., d, d)`` :math:`\sum_j k_j^\top k_j`,
    ``count (...)``. Independent components give about :math:`1/\text{count}`; ``(...)``."""
    mean = sums / count[..., None]
    cov = moments / count[..., None, None] - mean[..., :, None] * mean[..., None, :]
    sd = cov.diagonal(dim1=-2, dim2=-1).sqrt()
    corr = cov / (sd[..., :, None] * sd[..., None, :])
    d = corr.shape[-1]
    off = ~torch.eye(d, dtype=torch.bool)
    return (corr * corr)[..., off].mean(-1)


def between_row_share(within: Tensor, pooled: Tensor) -> Tensor:
    """The share of a pooled variance that lies between rows: ``1 − within / pooled``."""
    return 1 - within / pooled

