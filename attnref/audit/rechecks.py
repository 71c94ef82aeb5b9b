r"""The trained-model rechecks of the book, measured on any loaded checkpoint.

One pass over the texts collects per-text sums (so that every statistic is a ratio of sums over
texts and its bootstrap replicates are one matrix product, as in chapter 6); then each recheck
records its checks with the claims engine (:mod:`attnref.book.claims`) and the engine's rule
decides its verdict. The statistics are computed with the functions the chapters use
(:mod:`attnref.analysis.trained`, :mod:`attnref.analysis.hull`); the thresholds below are fixed
here, before any model is read, and shown in the report:

======  =========================================================================================
H2      every head's fused :math:`W_Q W_K^\top` has rank exactly :math:`d_k`: both factors' smallest
        singular value certified above the SVD's round-off (``trained.column_rank_margin`` > 1).
C3      premise (independent unit-variance components of q and k): under it the variance of
        :math:`q\cdot k` over the keys of a row is :math:`d_k` on average. The median head's
        ratio :math:`\mathrm{Var}_j(q\cdot k_j)/d_k` lying outside [0.8, 1.25] (off by more than
        a quarter) refutes the premise.
C6      premise (equal norms of the vectors the scores use): the median head's coefficient of
        variation of the key norms above 0.05 refutes it.
L4      premise (isotropic vectors): :math:`\mathrm{E}[\cos^2]\cdot d` between tokens of different
        texts above 2 (isotropy gives 1) in the median block refutes it.
A2      holds if, in the median block (the median over blocks of each statistic), the mean cosine
        between tokens of different texts is above 0.05 and :math:`\mathrm{E}[\cos^2]\cdot d` above 2.
A1      holds if some block puts more than half of its attention mass on the first token
        (averaged over heads and over the query rows that see more than one key) and more than
        five times what uniform weights would put there. (The chapters' second half, the sink's
        small value vector, is not measured by the audit.)
C9      on one long text (the texts joined): no key strictly inside the convex hull of the other
        keys of its head receives the largest weight of a row that sees every key; at least one
        such key must exist, or there is nothing to test.
======  =========================================================================================

Intervals are normal-approximation bootstrap intervals over the texts (nominal level 95 %),
as in chapter 6.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from attnref.analysis import hull, trained
from attnref.audit.families import AuditError, Loaded
from attnref.book import claims

Tensor = torch.Tensor

LEVEL = 0.05                  # each bootstrap interval's nominal failure probability
REPLICATES = 2000             # bootstrap resamples of the texts
HULL_TOKENS = 256             # the long text of C9, at most this many tokens
THRESHOLDS = {"C3": (0.8, 1.25), "C6": 0.05, "L4": 2.0, "A2": (0.05, 2.0), "A1": (0.5, 5.0)}


class _Recheck(claims.Evidence):
    """An :class:`attnref.book.claims.Evidence` for a model the book's registry does not list: the
    checks and the rule are the engine's; the model is only a name here."""

    def __init__(self, claim_id: str, model: str):
        self.claim = claims.claim(claim_id)
        self.model = model
        self.checks = []
        claims._Recorder.__init__(self, self, claims.STATED)


@dataclass
class Sums:
    """Per-text sums of one pass over the texts (S texts, L blocks, h heads)."""

    variance: Tensor          # (S, L, h): Σ over rows of Var_j(q_i·k_j)
    rows: Tensor              # (S,): rows with ≥ 2 visible keys
    key_norm: Tensor          # (S, L, h): Σ ‖k_j‖
    key_norm_sq: Tensor       # (S, L, h): Σ ‖k_j‖²
    tokens: Tensor            # (S,)
    first_mass: Tensor        # (S, L, h): Σ over rows of the weight on the first token
    uniform_mass: Tensor      # (S,): Σ over rows of 1 / (visible keys)
    unit: list[list[Tensor]]  # [L][S] (n_s, d): token vectors after each block, unit norm


def _allowed(n: int, causal: bool) -> Tensor:
    full = torch.ones(n, n, dtype=torch.bool)
    return torch.tril(full) if causal else full


def collect(model: Loaded, ids: list[list[int]], progress=None) -> Sums:
    """Run every text and keep the sums the rechecks need."""
    S, L, h = len(ids), model.layers, model.heads
    sums = Sums(variance=torch.zeros(S, L, h, dtype=torch.float64), rows=torch.zeros(S, dtype=torch.float64),
                key_norm=torch.zeros(S, L, h, dtype=torch.float64), key_norm_sq=torch.zeros(S, L, h, dtype=torch.float64),
                tokens=torch.zeros(S, dtype=torch.float64), first_mass=torch.zeros(S, L, h, dtype=torch.float64),
                uniform_mass=torch.zeros(S, dtype=torch.float64), unit=[[] for _ in range(L)])
    for s, text_ids in enumerate(ids):
        n = len(text_ids)
        allowed = _allowed(n, model.causal)                        # (n, n): key j visible from query i
        visible = allowed.sum(-1)                                  # (n,)
        several = visible >= 2                                     # rows whose softmax has a choice
        with torch.no_grad():
            run = model.run(text_ids)
        sums.rows[s] = several.sum()
        sums.tokens[s] = n
        sums.uniform_mass[s] = (1.0 / visible[several].double()).sum()
        for l in range(L):
            q, k = run.queries[l].double(), run.keys[l].double()  # (h, n, d_k)
            dots = q @ k.transpose(-2, -1)                         # (h, n, d_k) @ (h, d_k, n) -> (h, n, n): q_i·k_j
            mean = (dots * allowed).sum(-1) / visible              # (h, n)
            var = (((dots - mean[..., None]) ** 2) * allowed).sum(-1) / visible   # (h, n): population variance
            sums.variance[s, l] = var[:, several].sum(-1)
            norms = k.norm(dim=-1)                                 # (h, n)
            sums.key_norm[s, l] = norms.sum(-1)
            sums.key_norm_sq[s, l] = (norms ** 2).sum(-1)
            w = run.weights[l].double()                            # (h, n, n)
            sums.first_mass[s, l] = w[:, several, 0].sum(-1)
            x = run.hidden[l + 1].double()                         # (n, d): after block l
            sums.unit[l].append(x / x.norm(dim=-1, keepdim=True))
        if progress is not None:
            progress(1)
    return sums


def _replicates(S: int, seed: int = 0) -> Tensor:
    generator = torch.Generator().manual_seed(seed)
    return trained.bootstrap_counts(S, REPLICATES, generator)      # (B, S)


def _median_heads(values: Tensor) -> Tensor:
    """The median over heads (the last axis flattened with the blocks): ``(..., L, h)`` -> ``(...)``."""
    return values.flatten(-2).median(-1).values


def _cross_text(units: list[Tensor], counts: Tensor) -> dict:
    """Mean cosine and E[cos²] between tokens of different texts, with their bootstrap replicates."""
    S = len(units)
    u = torch.cat(units)                                           # (N, d)
    owner = torch.cat([torch.full((x.shape[0],), s) for s, x in enumerate(units)])
    one_hot = torch.nn.functional.one_hot(owner, S).double()       # (N, S)
    gram = u @ u.T                                                 # (N, N): cosines
    cos = one_hot.T @ gram @ one_hot                               # (S, S): Σ cos over token pairs of texts s, t
    cos_sq = one_hot.T @ (gram ** 2) @ one_hot                     # (S, S): Σ cos²
    n = one_hot.sum(0)
    pairs = torch.outer(n, n)                                      # (S, S)
    off = 1.0 - torch.eye(S, dtype=torch.float64)                  # different texts only

    def ratio(c: Tensor, a: Tensor, b: Tensor) -> Tensor:          # c (..., S): Σ_{s≠t} c_s c_t a_st / Σ c_s c_t b_st
        return ((c @ (a * off)) * c).sum(-1) / ((c @ (b * off)) * c).sum(-1)

    ones = torch.ones(S, dtype=torch.float64)
    # a resample that drew one text only has no pair of different texts: it is left out (0/0)
    drawn = (counts > 0).sum(-1) >= 2
    return {"cos": ratio(ones, cos, pairs), "cos_reps": ratio(counts[drawn], cos, pairs),
            "cos_sq": ratio(ones, cos_sq, pairs), "cos_sq_reps": ratio(counts[drawn], cos_sq, pairs)}


def measure(model: Loaded, sums: Sums, long_ids: list[int] | None) -> dict:
    """Every recheck's numbers (plain floats and lists, for the report) and intervals."""
    S, L, h = sums.variance.shape
    counts = _replicates(S)
    out: dict = {}

    # H2: the fused matrices' rank, from the weights
    margins, stable = [], []
    for w_q, w_k in model.factors():                               # (h, d, d_k) each, float64
        margins.append(torch.minimum(trained.column_rank_margin(w_q), trained.column_rank_margin(w_k)))
        stable.append(trained.stable_rank(trained.fused_spectrum(w_q, w_k)))
    margins, stable = torch.stack(margins), torch.stack(stable)    # (L, h)
    out["H2"] = {"certified_heads": int((margins > 1).sum()), "heads": L * h,
                 "smallest_margin": float(margins.min()), "median_stable_rank": float(stable.median()),
                 "d_k": model.d_k}

    # C3: Var_j(q·k_j) / d_k per head, median over heads
    ratio = sums.variance.sum(0) / (sums.rows.sum() * model.d_k)   # (L, h)
    reps = trained.ratio_replicates(counts, sums.variance, sums.rows[:, None, None] * model.d_k)   # (B, L, h)
    out["C3"] = {"per_head": ratio.tolist(),
                 "median": trained.bootstrap_interval(_median_heads(ratio), _median_heads(reps), LEVEL, scale="log")}

    # C6: coefficient of variation of the key norms per head, median over heads
    cv = trained.coefficient_of_variation(sums.key_norm.sum(0), sums.key_norm_sq.sum(0), sums.tokens.sum())
    cv_reps = trained.coefficient_of_variation(torch.einsum("bs,slh->blh", counts, sums.key_norm),
                                               torch.einsum("bs,slh->blh", counts, sums.key_norm_sq),
                                               (counts @ sums.tokens)[:, None, None])
    out["C6"] = {"per_head": cv.tolist(),
                 "median": trained.bootstrap_interval(_median_heads(cv), _median_heads(cv_reps), LEVEL, scale="log")}

    # L4 / A2: cosines between tokens of different texts, every block; the median block
    per_block = [_cross_text(sums.unit[l], counts) for l in range(L)]
    cos = torch.stack([b["cos"] for b in per_block]).median()
    cos_reps = torch.stack([b["cos_reps"] for b in per_block]).median(0).values         # (B',)
    cos_sq = torch.stack([b["cos_sq"] for b in per_block]).median() * model.d
    cos_sq_reps = torch.stack([b["cos_sq_reps"] for b in per_block]).median(0).values * model.d
    out["anisotropy"] = {
        "mean_cos_per_block": [float(b["cos"]) for b in per_block],
        "cos_sq_d_per_block": [float(b["cos_sq"]) * model.d for b in per_block],
        "mean_cos": trained.bootstrap_interval(cos, cos_reps, LEVEL),
        "cos_sq_d": trained.bootstrap_interval(cos_sq, cos_sq_reps, LEVEL, scale="log")}

    # A1: attention mass on the first token, per block (mean over heads and rows)
    share = sums.first_mass.sum(0).mean(-1) / sums.rows.sum()      # (L,)
    share_reps = torch.einsum("bs,slh->blh", counts, sums.first_mass).mean(-1) / (counts @ sums.rows)[:, None]
    uniform = float(sums.uniform_mass.sum() / sums.rows.sum())
    top = int(share.argmax())
    out["A1"] = {"share_per_block": share.tolist(), "uniform": uniform, "block": top,
                 "share": trained.bootstrap_interval(share[top], share_reps[:, top], LEVEL, scale="logit")}

    # C9: interior keys of one long text, and whether one wins a row that sees every key
    if long_ids is not None:
        with torch.no_grad():
            run = model.run(long_ids)
        n = len(long_ids)
        rows = torch.arange(n) if not model.causal else torch.tensor([n - 1])   # the rows that see every key
        interior_total, winners = 0, 0
        for l in range(L):
            keys, w = run.keys[l].double(), run.weights[l].double()            # (h, n, d_k), (h, n, n)
            for head in range(h):
                inside = hull.interior_points(keys[head])                       # (n,) bool
                interior_total += int(inside.sum())
                best = w[head, rows].argmax(-1)                                 # (rows,)
                winners += int(inside[best].sum())
        out["C9"] = {"tokens": n, "interior_keys": interior_total, "interior_winners": winners, "heads": L * h}
    return out


def _interval_dict(iv) -> dict:
    return {"estimate": float(iv.estimate), "low": float(iv.low), "high": float(iv.high), "bound": iv.bound,
            "failure_probability": float(iv.failure_probability)}


def verdicts(model_name: str, m: dict) -> dict[str, tuple[str, list]]:
    """Each recheck's checks, recorded with the claims engine, and the verdict its rule gives."""
    out = {}
    K = claims.REAL_MODEL

    h2 = _Recheck("H2", model_name)
    h2.exact(f"heads whose fused W has rank exactly d_k = {m['H2']['d_k']} (both factors' margins > 1)",
             m["H2"]["certified_heads"], m["H2"]["heads"], kind=K,
             fails_if="a head whose W_Q or W_K loses a column (rank < d_k), or a margin at round-off level")
    out["H2"] = h2

    c3 = _Recheck("C3", model_name)
    iv = m["C3"]["median"]
    low, high = THRESHOLDS["C3"]
    if iv.estimate >= 1:
        c3.premise_fails.beyond(f"median head's Var_j(q·k)/d_k lies above {high} (premise: 1)", high, iv, side="below",
                                fails_if="queries and keys with independent unit-variance components (ratio ≈ 1)")
    else:
        c3.premise_fails.beyond(f"median head's Var_j(q·k)/d_k lies below {low} (premise: 1)", low, iv, side="above",
                                fails_if="queries and keys with independent unit-variance components (ratio ≈ 1)")
    out["C3"] = c3

    c6 = _Recheck("C6", model_name)
    c6.premise_fails.beyond(f"median head's coefficient of variation of the key norms lies above {THRESHOLDS['C6']}",
                            THRESHOLDS["C6"], m["C6"]["median"], side="below",
                            fails_if="keys of (nearly) equal norm, as after a norm with no gain on the keys")
    out["C6"] = c6

    l4 = _Recheck("L4", model_name)
    l4.premise_fails.beyond(f"E[cos²]·d between tokens of different texts, median block, lies above {THRESHOLDS['L4']} (isotropic: 1)",
                            THRESHOLDS["L4"], m["anisotropy"]["cos_sq_d"], side="below",
                            fails_if="isotropic token vectors (E[cos²]·d ≈ 1)")
    out["L4"] = l4

    a2 = _Recheck("A2", model_name)
    a2.beyond(f"mean cosine between tokens of different texts, median block, lies above {THRESHOLDS['A2'][0]}",
              THRESHOLDS["A2"][0], m["anisotropy"]["mean_cos"], side="below",
              fails_if="token vectors without a common direction (mean cosine ≈ 0)")
    a2.beyond(f"E[cos²]·d, median block, lies above {THRESHOLDS['A2'][1]}", THRESHOLDS["A2"][1],
              m["anisotropy"]["cos_sq_d"], side="below", fails_if="isotropic token vectors (E[cos²]·d ≈ 1)")
    out["A2"] = a2

    a1 = _Recheck("A1", model_name)
    share, uniform = m["A1"]["share"], m["A1"]["uniform"]
    a1.beyond(f"block {m['A1']['block'] + 1}'s attention mass on the first token lies above {THRESHOLDS['A1'][0]}",
              THRESHOLDS["A1"][0], share, side="below", fails_if="no block parks most of its mass on one token")
    a1.beyond(f"… and above {THRESHOLDS['A1'][1]:g} × the uniform share {uniform:.3f}", THRESHOLDS["A1"][1] * uniform,
              share, side="below", fails_if="mass on the first token no larger than short rows give it anyway")
    out["A1"] = a1

    if "C9" in m:
        c9 = _Recheck("C9", model_name)
        c9.supporting.at_least(f"keys strictly inside the hull of their head's other keys ({m['C9']['tokens']} tokens, "
                               f"{m['C9']['heads']} heads)", m["C9"]["interior_keys"], 1, kind=claims.NUMERICAL,
                               agree=claims.EXACT)
        c9.exact("rows that see every key whose largest weight goes to an interior key", m["C9"]["interior_winners"], 0,
                 kind=K, fails_if="an interior key winning a row: the hull argument or the key extraction is wrong")
        out["C9"] = c9
    return {cid: (claims.decide(ev.checks), ev.checks) for cid, ev in out.items()}


def plain(m: dict) -> dict:
    """The measurements as JSON-ready values (intervals as dictionaries)."""
    def convert(value):
        if hasattr(value, "low") and hasattr(value, "high"):
            return _interval_dict(value)
        if isinstance(value, dict):
            return {k: convert(v) for k, v in value.items()}
        if isinstance(value, Tensor):
            return value.tolist()
        if isinstance(value, float) and not math.isfinite(value):
            return str(value)
        return value
    return convert(m)


def check_texts(model: Loaded, texts: list[str]) -> list[list[int]]:
    """Token ids of every text, refusing an empty set and any text longer than the model's context."""
    if not texts:
        raise AuditError("no text to read: the text file holds no non-blank line")
    ids = []
    for number, text in enumerate(texts, start=1):
        tokens = model.tokenize(text)
        if len(tokens) > model.context:
            raise AuditError(f"text {number} has {len(tokens)} tokens, more than the model's context of {model.context}")
        if len(tokens) < 2:
            raise AuditError(f"text {number} has {len(tokens)} token(s): a recheck needs at least 2 per text")
        ids.append(tokens)
    return ids
