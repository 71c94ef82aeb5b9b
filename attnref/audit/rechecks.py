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
        such key must exist: with none the premise fails here (C9 costs nothing on this text;
        :func:`attnref.analysis.hull.record_c9`, the one definition the chapters use too).
D1      (causal decoders; chapter 6b's recheck) the relative residual
        :math:`r_l = \lVert H - \mathbf 1 \bar h^\top\rVert_F / \lVert H\rVert_F` (ratio of sums over
        texts) of the residual stream after the last block lies above 0.1 (a counterexample to
        "with or without skips"); along the attention-only path without skips,
        :math:`Y^{(l)} = \operatorname{Att}_l(Y^{(l-1)})` with the model's weights in float64, it lies
        below :math:`10^{-3}` after the last block (the collapse, under "no skip connections"); its
        mean rate :math:`-\ln(r_l/r_{l-1})` over the last :math:`\lfloor L/3\rfloor` layers is at most
        twice that of layers :math:`\lfloor L/6\rfloor + 1 \ldots \lfloor L/2\rfloor` (no acceleration:
        a counterexample to "doubly exponentially"); and the same path without the causal mask
        accelerates, late/early rate at least 1.5 (a supporting control: the mask makes the rate
        constant). With :math:`L = 30` these are chapter 6b's layers 6–15 and 21–30.
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
THRESHOLDS = {"C3": (0.8, 1.25), "C6": 0.05, "L4": 2.0, "A2": (0.05, 2.0), "A1": (0.5, 5.0),
              "D1": {"stream": 0.1, "collapse": 1e-3, "acceleration": 2.0, "control": 1.5}}


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
    spread_sq: Tensor         # (S, L + 1): ‖H^(l) − 1 h̄ᵀ‖_F² of the residual stream (D1)
    total_sq: Tensor          # (S, L + 1): ‖H^(l)‖_F²
    first: list[Tensor]       # [S] (n_s, d) float64: H^(0), where D1's attention-only path starts


def _allowed(n: int, causal: bool) -> Tensor:
    full = torch.ones(n, n, dtype=torch.bool)
    return torch.tril(full) if causal else full


def collect(model: Loaded, ids: list[list[int]], progress=None) -> Sums:
    """Run every text and keep the sums the rechecks need."""
    S, L, h = len(ids), model.layers, model.heads
    sums = Sums(variance=torch.zeros(S, L, h, dtype=torch.float64), rows=torch.zeros(S, dtype=torch.float64),
                key_norm=torch.zeros(S, L, h, dtype=torch.float64), key_norm_sq=torch.zeros(S, L, h, dtype=torch.float64),
                tokens=torch.zeros(S, dtype=torch.float64), first_mass=torch.zeros(S, L, h, dtype=torch.float64),
                uniform_mass=torch.zeros(S, dtype=torch.float64), unit=[[] for _ in range(L)],
                spread_sq=torch.zeros(S, L + 1, dtype=torch.float64), total_sq=torch.zeros(S, L + 1, dtype=torch.float64),
                first=[])
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
        for l, state in enumerate(run.hidden):                     # H^(0) … H^(L)
            sums.spread_sq[s, l], sums.total_sq[s, l] = spread_and_total(state.double())
        sums.first.append(run.hidden[0].double())
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


def spread_and_total(x: Tensor) -> tuple[Tensor, Tensor]:
    """``‖X − 1 x̄ᵀ‖_F²`` and ``‖X‖_F²`` of one text's token vectors ``x (n, d)`` (D1's residual
    :math:`r^2`, as a ratio of sums; chapter 6b's ``spread_sq``, ``total_sq``)."""
    return (x - x.mean(0, keepdim=True)).pow(2).sum(), x.pow(2).sum()


def attention_paths(model: Loaded, first: list[Tensor], progress=None) -> dict[str, Tensor]:
    """D1's attention-only path without skips, ``Y^(0) = H^(0)``, ``Y^(l) = branch_l(Y^(l−1))``, per text,
    with the causal mask (``pure_*``) and without it (``free_*``): ``(S, L + 1)`` sums of
    :func:`spread_and_total`. One block's weights are converted to float64 at a time."""
    S, L = len(first), model.layers
    out = {name: torch.zeros(S, L + 1, dtype=torch.float64)
           for name in ("pure_spread_sq", "pure_total_sq", "free_spread_sq", "free_total_sq")}
    pure, free = list(first), list(first)
    for s, y in enumerate(first):
        out["pure_spread_sq"][s, 0], out["pure_total_sq"][s, 0] = spread_and_total(y)
        out["free_spread_sq"][s, 0], out["free_total_sq"][s, 0] = spread_and_total(y)
    for l in range(L):
        branch = model.attention_branch(l)
        for s in range(S):
            pure[s], free[s] = branch(pure[s], True), branch(free[s], False)
            out["pure_spread_sq"][s, l + 1], out["pure_total_sq"][s, l + 1] = spread_and_total(pure[s])
            out["free_spread_sq"][s, l + 1], out["free_total_sq"][s, l + 1] = spread_and_total(free[s])
        if progress is not None:
            progress(1)
    return out


def rate_ratio(residual: Tensor) -> Tensor:
    r"""Late over early mean collapse rate of a residual curve ``r_0 … r_L`` (``(L + 1,)``): the
    rates :math:`-\ln(r_l/r_{l-1})` of the last ``L // 3`` layers over those of layers
    ``L // 6 + 1 … L // 2`` (chapter 6b's 21–30 over 6–15 for L = 30)."""
    L = residual.shape[0] - 1
    rates = -torch.diff(residual.log())                            # (L,)
    return rates[-(L // 3):].mean() / rates[L // 6: L // 2].mean()


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


def measure(model: Loaded, sums: Sums, long_ids: list[int] | None, paths: dict[str, Tensor] | None = None) -> dict:
    """Every recheck's numbers (plain floats and lists, for the report) and intervals; ``paths``:
    :func:`attention_paths` (D1 is measured only with them)."""
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

    # D1: distance from rank one along the residual stream and along the attention-only path
    if paths is not None:
        def residual(spread: Tensor, total: Tensor):
            estimate = (spread.sum(0) / total.sum(0)).sqrt()                                 # (L + 1,)
            last = trained.bootstrap_interval(estimate[-1], trained.ratio_replicates(counts, spread, total)[:, -1].sqrt(),
                                              LEVEL, scale="log")
            return estimate, last
        stream, stream_last = residual(sums.spread_sq, sums.total_sq)
        pure, pure_last = residual(paths["pure_spread_sq"], paths["pure_total_sq"])
        free, free_last = residual(paths["free_spread_sq"], paths["free_total_sq"])
        out["D1"] = {"stream_per_layer": stream.tolist(), "pure_per_layer": pure.tolist(), "free_per_layer": free.tolist(),
                     "stream_last": stream_last, "pure_last": pure_last, "free_last": float(free[-1]),
                     # the rate test needs disjoint, non-empty early and late layer sets: L >= 3 (D1_MIN_BLOCKS)
                     "rate_ratio": float(rate_ratio(pure)) if L >= D1_MIN_BLOCKS else None,
                     "free_rate_ratio": float(rate_ratio(free)) if L >= D1_MIN_BLOCKS else None,
                     "early_layers": [L // 6 + 1, L // 2], "late_layers": [L - L // 3 + 1, L], "layers": L}

    # C9: interior keys of one long text, and whether one wins a row that sees every key
    if long_ids is not None:
        with torch.no_grad():
            run = model.run(long_ids)
        n = len(long_ids)
        rows = torch.arange(n) if not model.causal else torch.tensor([n - 1])   # the rows that see every key
        interior_total, winners = 0, 0
        for l in range(L):
            keys, w = run.keys[l].double(), run.weights[l].double()            # (h, n, d_k), (h, n, n)
            inside = None
            for head in range(h):
                if inside is None or not torch.equal(keys[head], keys[head - 1]):   # heads of one key head share it
                    # exact either way; the centred keys as candidate separating directions certify
                    # more vertices at once than the keys themselves (anisotropic keys): half the time
                    inside = hull.interior_points(keys[head], keys[head] - keys[head].mean(0))   # (n,) bool
                interior_total += int(inside.sum())
                best = w[head, rows].argmax(-1)                                 # (rows,)
                winners += int(inside[best].sum())
        out["C9"] = {"tokens": n, "interior_keys": interior_total, "interior_winners": winners, "heads": L * h}

    # registered rechecks (register): each measures what it needs from the same pass
    load_extensions()
    for cid, (measure_extension, _) in EXTENSIONS.items():
        value = measure_extension(model, sums, long_ids, paths)
        if value is not None:
            out[cid] = value
    return out


def _interval_dict(iv) -> dict:
    return {"estimate": float(iv.estimate), "low": float(iv.low), "high": float(iv.high), "bound": iv.bound,
            "failure_probability": float(iv.failure_probability), "samples": int(iv.samples),
            "standard_error": None if iv.standard_error is None else float(iv.standard_error)}


_INTERVAL_KEYS = {"estimate", "low", "high", "bound", "failure_probability", "samples", "standard_error"}


def from_plain(m: dict) -> dict:
    """The measurements of a stored ``report.json`` with their intervals as
    :class:`attnref.analysis.stats.Interval` again: what :func:`record` reads (so a chapter decides
    a stored report's rechecks with exactly the audit's checks)."""
    from attnref.analysis.stats import Interval

    def convert(value):
        if isinstance(value, dict) and set(value) == _INTERVAL_KEYS:
            return Interval(**value)
        if isinstance(value, dict):
            return {k: convert(v) for k, v in value.items()}
        return value
    return convert(m)


#: The rechecks in the report's order (each is recorded only if its measurement is there).
RECHECKS = ("H2", "C3", "C6", "L4", "A2", "A1", "C9", "D1")

#: Rechecks added by other modules through :func:`register`: ID -> (measure, record). A module
#: ``attnref/audit/recheck_*.py`` is imported by :func:`load_extensions` (nothing else to edit); it
#: calls :func:`register` at import. See /tmp/team/audit-extension.md (and book/audit.md).
EXTENSIONS: dict = {}


def register(claim_id: str, measure, record) -> None:
    """Add a recheck: ``measure(model, sums, long_ids, paths) -> dict | None`` (its measurements,
    JSON-ready after :func:`plain`, stored under ``claim_id``; None: not measured on this model) and
    ``record(evidence, m)`` (records its checks from ``m[claim_id]`` with the claims engine)."""
    if claim_id in RECHECKS:
        raise ValueError(f"{claim_id} is one of the audit's own rechecks ({', '.join(RECHECKS)})")
    EXTENSIONS[claim_id] = (measure, record)


def load_extensions() -> list[str]:
    """Import every ``attnref.audit.recheck_*`` module (each registers its rechecks); their IDs."""
    import importlib
    import pkgutil

    import attnref.audit as package
    for info in pkgutil.iter_modules(package.__path__):
        if info.name.startswith("recheck_"):
            importlib.import_module(f"{package.__name__}.{info.name}")
    return list(EXTENSIONS)


def measured_rechecks(m: dict) -> list[str]:
    """The rechecks whose measurements ``m`` holds (the audit's own, then the registered ones)."""
    needs = {"L4": "anisotropy", "A2": "anisotropy"}
    return [cid for cid in RECHECKS + tuple(EXTENSIONS) if needs.get(cid, cid) in m]


def verdicts(model_name: str, m: dict) -> dict[str, tuple[str, list]]:
    """Each recheck's checks, recorded with the claims engine, and the verdict its rule gives."""
    out = {}
    for cid in measured_rechecks(m):
        evidence = _Recheck(cid, model_name)
        record(evidence, m)
        out[cid] = evidence
    return {cid: (claims.decide(ev.checks), ev.checks) for cid, ev in out.items()}


def record(evidence, m: dict) -> None:
    """Record the checks of ``evidence``'s claim (an :class:`attnref.book.claims.Evidence` of a
    recheck, or the audit's own) from the measurements ``m`` (:func:`measure`'s, or a stored
    report's through :func:`from_plain`): the one place each recheck's checks are written."""
    cid = evidence.claim.id
    if cid in EXTENSIONS:
        EXTENSIONS[cid][1](evidence, m)
        return
    if cid not in RECHECKS:
        raise ValueError(f"the audit has no recheck of {cid}; it has {', '.join(RECHECKS + tuple(EXTENSIONS))}")
    globals()[f"_record_{cid}"](evidence, m)


K = claims.REAL_MODEL


def _record_H2(h2, m: dict) -> None:
    h2.exact(f"heads whose fused W has rank exactly d_k = {m['H2']['d_k']} (both factors' margins > 1)",
             m["H2"]["certified_heads"], m["H2"]["heads"], kind=K,
             fails_if="a head whose W_Q or W_K loses a column (rank < d_k), or a margin at round-off level")


def _record_C3(c3, m: dict) -> None:
    iv = m["C3"]["median"]
    low, high = THRESHOLDS["C3"]
    if iv.estimate >= 1:
        c3.premise_fails.beyond(f"median head's Var_j(q·k)/d_k lies above {high} (premise: 1)", high, iv, side="below",
                                fails_if="queries and keys with independent unit-variance components (ratio ≈ 1)")
    else:
        c3.premise_fails.beyond(f"median head's Var_j(q·k)/d_k lies below {low} (premise: 1)", low, iv, side="above",
                                fails_if="queries and keys with independent unit-variance components (ratio ≈ 1)")


def _record_C6(c6, m: dict) -> None:
    c6.premise_fails.beyond(f"median head's coefficient of variation of the key norms lies above {THRESHOLDS['C6']}",
                            THRESHOLDS["C6"], m["C6"]["median"], side="below",
                            fails_if="keys of (nearly) equal norm, as after a norm with no gain on the keys")


def _record_L4(l4, m: dict) -> None:
    l4.premise_fails.beyond(f"E[cos²]·d between tokens of different texts, median block, lies above {THRESHOLDS['L4']} (isotropic: 1)",
                            THRESHOLDS["L4"], m["anisotropy"]["cos_sq_d"], side="below",
                            fails_if="isotropic token vectors (E[cos²]·d ≈ 1)")


def _record_A2(a2, m: dict) -> None:
    a2.beyond(f"mean cosine between tokens of different texts, median block, lies above {THRESHOLDS['A2'][0]}",
              THRESHOLDS["A2"][0], m["anisotropy"]["mean_cos"], side="below",
              fails_if="token vectors without a common direction (mean cosine ≈ 0)")
    a2.beyond(f"E[cos²]·d, median block, lies above {THRESHOLDS['A2'][1]}", THRESHOLDS["A2"][1],
              m["anisotropy"]["cos_sq_d"], side="below", fails_if="isotropic token vectors (E[cos²]·d ≈ 1)")


def _record_A1(a1, m: dict) -> None:
    share, uniform = m["A1"]["share"], m["A1"]["uniform"]
    a1.beyond(f"block {m['A1']['block'] + 1}'s attention mass on the first token lies above {THRESHOLDS['A1'][0]}",
              THRESHOLDS["A1"][0], share, side="below", fails_if="no block parks most of its mass on one token")
    a1.beyond(f"… and above {THRESHOLDS['A1'][1]:g} × the uniform share {uniform:.3f}", THRESHOLDS["A1"][1] * uniform,
              share, side="below", fails_if="mass on the first token no larger than short rows give it anyway")


def _record_C9(c9, m: dict) -> None:
    # the one definition of C9 on a trained model (chapters 6, 6b and 6c call it too): 0 interior keys ->
    # premise fails here; >= 1 -> none of them wins a row that sees every key -> holds
    hull.record_c9(c9, m["C9"]["interior_keys"], m["C9"]["interior_winners"],
                   where=f"{m['C9']['tokens']}-token text, {m['C9']['heads']} heads")


#: D1's rate test compares layers L//6 + 1 … L//2 with the last L//3: both non-empty and disjoint from L = 3 on.
D1_MIN_BLOCKS = 3


def _record_D1(d1, m: dict) -> None:
    t, d = THRESHOLDS["D1"], m["D1"]
    L, (e0, e1), (l0, l1) = d["layers"], d["early_layers"], d["late_layers"]
    if L < D1_MIN_BLOCKS or d.get("rate_ratio") is None:
        # with fewer blocks the early and late layer sets are empty or overlap ("layers 3–2" against
        # "layers 1–1"): the rate test is undefined, and D1 is not established, with this reason
        d1.supporting.at_least(f"blocks in the model (D1's rate test needs at least {D1_MIN_BLOCKS} blocks: "
                               f"an early and a late set of layers, disjoint and non-empty)", L, D1_MIN_BLOCKS,
                               kind=K, fails_if="a model too shallow for the rate test")
        return
    d1.counterexample.beyond(f"relative residual of the residual stream after {L} blocks", t["stream"], d["stream_last"],
                             side="below", fails_if="the skips do not carry the tokens (collapse with skips too)")
    d1.under("no skip connections").beyond(f"relative residual of the attention-only path, {L} layers",
                                           t["collapse"], d["pure_last"], side="above",
                                           fails_if="attention alone keeps the tokens apart (no collapse)")
    d1.counterexample.at_most(f"mean rate of layers {l0}–{l1} / of layers {e0}–{e1}, attention only "
                              "(doubly exponential: far above 1)", d["rate_ratio"], t["acceleration"], kind=K,
                              fails_if="the collapse accelerates with depth, as doubly exponential would")
    d1.supporting.at_least(f"control, the same path without the causal mask: mean rate of layers {l0}–{l1} / "
                           f"of layers {e0}–{e1} (the mask's effect)", d["free_rate_ratio"], t["control"], kind=K,
                           fails_if="the constant rate is not the mask's doing: full attention with the "
                                    "same weights does not accelerate either")


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
