r"""What QK-norm changes in a trained model, measured on Gemma 3 270M (claims G1–G4, chapter 6c).

One function per measurement; each takes a loaded :class:`attnref.models.gemma3.Gemma3` and token
ids and returns plain tensors (float64), so that ``make measure-gemma`` (``tools/measure_gemma.py``)
and an audit can call them alike. Notation: block ``l``, query head ``i`` (key head
``g(i) = i // (h / h_kv)``; Gemma 3 270M has one key head), QK-norm gains ``g_q = 1 + w_q`` and
``g_k = 1 + w_k``, the normalised queries and keys :math:`\hat q = g_q \odot u_q`,
:math:`\hat k = g_k \odot u_k` with :math:`\lVert u\rVert = \sqrt{d_k}` (up to ε), rotated by
:math:`R_t` (position ``t``), scores :math:`s_{tj} = c\,\tilde q_t \cdot \tilde k_j` with the
query scale ``c``.

G1 · :func:`selectability`: the keys lie on an ellipsoid, so each is the unique best key for the
   query direction :math:`D_k^{-2}\hat k_j` (the ellipsoid's normal at :math:`\hat k_j`); the
   witness gap is measured for every key, before rotation (exact theory) and after it.
G2 · :func:`fused_form`: :math:`s_{tj} = c\, x_t W_Q D_q R_{j-t} D_k W_K^\top x_j^\top /
   (\rho_q(x_t)\,\rho_k(x_j))` with :math:`\rho(x) = \sqrt{\operatorname{mean}((xW)^2) + ε}`,
   checked against the model's scores; the rank of the fused :math:`W_Q D_q D_k W_K^\top`; the
   spread of the per-token factors :math:`1/\rho` (the temperature that moved into the norms).
G3 · :func:`logit_bounds` and :func:`sentence_sums`: the bound
   :math:`|s| \le c\, d_k \max_p \max(g_{q,p}, g_{q,p'}) \max(g_{k,p}, g_{k,p'})` (rotation
   pairs ``p, p' = p + d_k/2``) against the largest measured logits and the rows' entropy.
G4 · :func:`distance_mass`: attention mass by distance ``t − j``, sliding vs global blocks.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import torch

from attnref import rope

Tensor = torch.Tensor

#: The source files whose code produces the stored numbers (their hash is stored with them).
SOURCES = ("attnref/models/gemma3.py", "attnref/qknorm.py", "attnref/decoder.py", "attnref/rope.py",
           "attnref/attention.py", "attnref/analysis/qknorm_model.py", "attnref/analysis/texts.py")
DATA = Path("data") / "gemma3-measurements"
ROOT = Path(__file__).resolve().parents[2]
#: Distance bins of G4: [0, 1), [1, 2), [2, 4), …, [256, 512), [512, 1024), [1024, ∞).
DISTANCE_EDGES = (0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


def _gains(model, layer: int) -> tuple[Tensor, Tensor]:
    w = model.layers[layer]
    return (1.0 + w.q_norm.double()), (1.0 + w.k_norm.double())           # (d_k,) each


# --- G3 -------------------------------------------------------------------------------------------

def logit_bounds(model) -> dict[str, Tensor]:
    r"""Per block (one value per key head's gains, shared by its query heads):

    ``bound_rotated`` :math:`c\, d_k \max_p \max(|g_{q,p}|, |g_{q,p'}|)\max(|g_{k,p}|, |g_{k,p'}|)`:
    the supremum over all unit-RMS ``u_q, u_k`` and all rotation angles of
    :math:`c\,(g_q \odot u_q) R (g_k \odot u_k)^\top` (each 2 × 2 block's largest singular value is
    largest at angle 0 or π/2); ``gain_q``, ``gain_k`` ``(layers, d_k)`` the gains themselves; ``bound_aligned`` :math:`c\, d_k \max_a |g_{q,a} g_{k,a}|` (offset 0,
    attained); ``bound_loose`` :math:`c\, d_k \max|g_q| \max|g_k|`."""
    c = model.config
    half = c.d_k // 2
    out = {name: torch.zeros(len(model.layers), dtype=torch.float64)
           for name in ("bound_rotated", "bound_aligned", "bound_loose")}
    for l in range(len(model.layers)):
        g_q, g_k = (g.abs() for g in _gains(model, l))
        pair_q = torch.maximum(g_q[:half], g_q[half:])                        # (d_k/2,)
        pair_k = torch.maximum(g_k[:half], g_k[half:])
        out["bound_rotated"][l] = c.scale * c.d_k * (pair_q * pair_k).max()
        out["bound_aligned"][l] = c.scale * c.d_k * (g_q * g_k).max()
        out["bound_loose"][l] = c.scale * c.d_k * g_q.max() * g_k.max()
    out["gain_q"] = torch.stack([_gains(model, l)[0] for l in range(len(model.layers))])   # (layers, d_k)
    out["gain_k"] = torch.stack([_gains(model, l)[1] for l in range(len(model.layers))])
    return out


def sentence_sums(model, ids: Tensor) -> dict[str, Tensor]:
    """One sentence (causal rows, float32 model): per block and query head ``(layers, h)``,
    ``max_logit`` the largest |score| over allowed pairs, ``max_weight`` the largest weight of rows
    with ≥ 2 keys, ``min_entropy`` / ``entropy`` the smallest / summed entropy (nats) of those rows,
    ``rows`` their number, ``within`` the summed within-row variance of the scores (C3's premise),
    ``sink_mass`` the summed weight on token 0 over rows t ≥ 1 (A1); per key head ``(layers, h_kv)``,
    ``value_first_norm`` ‖v_0‖ and ``value_other_norm`` Σ_{j≥1} ‖v_j‖ (A1's no-op reading)."""
    from attnref.models.gemma3 import forward

    c = model.config
    n = ids.shape[-1]
    with torch.no_grad():
        out = forward(model, ids, logits=False)
    allowed = torch.ones(n, n, dtype=torch.bool).tril()
    enough = allowed.sum(-1) >= 2
    L = len(model.layers)
    result = {name: torch.zeros(L, c.h, dtype=torch.float64)
              for name in ("max_logit", "max_weight", "min_entropy", "entropy", "rows", "within", "sink_mass")}
    result.update({name: torch.zeros(L, c.h_kv, dtype=torch.float64) for name in ("value_first_norm", "value_other_norm")})
    group = c.h // c.h_kv
    for l, block in enumerate(out.blocks):
        trace = block.trace.attention.trace
        value_norms = trace.value.double().norm(dim=-1)                            # (h_kv, n)
        result["value_first_norm"][l], result["value_other_norm"][l] = value_norms[:, 0], value_norms[:, 1:].sum(-1)
        q, k = trace.rotated_query.double(), trace.rotated_key.double().repeat_interleave(group, 0)
        scores = c.scale * q @ k.transpose(-2, -1)                               # (h, n, n)
        window = c.layer_window(l)
        seen = allowed if window is None else allowed & (torch.arange(n)[None, :] > torch.arange(n)[:, None] - window)
        result["max_logit"][l] = scores.abs().masked_fill(~seen, 0).amax((-1, -2))
        p = block.weights.double()                                                 # (h, n, n)
        entropy = -(p * p.clamp_min(1e-300).log()).sum(-1)                         # (h, n)
        result["max_weight"][l] = p[:, enough].amax((-1, -2))
        result["min_entropy"][l] = entropy[:, enough].amin(-1)
        result["entropy"][l] = entropy[:, enough].sum(-1)
        result["rows"][l] = enough.sum()
        count = seen.sum(-1).double()
        masked = scores.masked_fill(~seen, 0.0)
        mean = masked.sum(-1) / count
        var = (masked.pow(2).sum(-1) / count - mean.pow(2)) * count / (count - 1).clamp(min=1)
        result["within"][l] = var[:, enough].sum(-1)
        result["sink_mass"][l] = p[:, 1:, 0].sum(-1)
    return result


def measure_sentences(model, token_ids: list[list[int]], progress=None) -> dict[str, Tensor]:
    """:func:`sentence_sums` of every sentence, stacked ``(sentences, layers, h)``."""
    rows = []
    for i, ids in enumerate(token_ids):
        rows.append(sentence_sums(model, torch.tensor(ids, dtype=torch.int64)))
        if progress is not None:
            progress(i + 1, len(token_ids))
    return {name: torch.stack([r[name] for r in rows]) for name in rows[0]}


# --- G1 -------------------------------------------------------------------------------------------

def _distinct(points: Tensor, tolerance: float) -> Tensor:
    """(n, n) bool: True where rows j, l are distinct points (more than ``tolerance`` apart)."""
    return torch.cdist(points, points) > tolerance


def selectability(model, ids: Tensor, out=None) -> dict[str, Tensor]:
    r"""G1 on one text. Per block and key head ``(layers, h_kv)``:

    ``radius_dev``      largest relative difference between :math:`\hat k_j / g_k` and the unit-RMS row
                        :math:`k_j/\sqrt{m_j + ε}` in norm (coordinates with a non-zero gain): 0 up to round-off
                        when every key lies on the ellipsoid of the gain ``g_k`` (radius
                        :math:`r_j = \sqrt{d_k}\sqrt{m_j/(m_j+ε)}`, :math:`m_j` the mean square before the norm)
    ``zero_gains``      the number of coordinates whose gain is exactly 0 (the ellipsoid is flat there)
    ``eps_shrink``      largest :math:`1 - r_j/\sqrt{d_k}` (how far ε pulls a key inside)
    ``witness_gap``     smallest over keys j of :math:`(s(\hat k_j) - \max_{l:\hat k_l \ne \hat k_j} s(\hat k_l))/\lVert w_j\rVert`
                        for the witness query :math:`w_j = D_k^{-2}\hat k_j` (before rotation): > 0 means every
                        key is the unique best for some query direction
    ``witness_rotated`` the number of rotated keys :math:`R_j \hat k_j` that the witness :math:`R_j w_j`
                        makes the unique best among the text's rotated keys (a certificate; keys it does not
                        certify are not shown unselectable)
    ``distinct``        the number of distinct keys (identical tokens give identical keys in block 0)
    Per block and query head ``(layers, h)``: ``text_selected``, the number of keys j that some query of
    the text scores strictly highest (rotated, every key, no mask), as chapter 6b counts on SmolLM2."""
    from attnref.models.gemma3 import forward

    c = model.config
    if out is None:
        with torch.no_grad():
            out = forward(model, ids, logits=False)
    L, n = len(model.layers), ids.shape[-1]
    result = {name: torch.zeros(L, c.h_kv, dtype=torch.float64)
              for name in ("radius_dev", "eps_shrink", "witness_gap", "witness_rotated", "distinct", "zero_gains")}
    result["text_selected"] = torch.zeros(L, c.h, dtype=torch.float64)
    positions = torch.arange(n)
    for l, block in enumerate(out.blocks):
        trace = block.trace.attention.trace
        _, g_k = _gains(model, l)
        for g in range(c.h_kv):
            key, k_hat = trace.key[g].double(), trace.normed_key[g].double()          # (n, d_k)
            mean_square = key.pow(2).mean(-1)
            radius = math.sqrt(c.d_k) * (mean_square / (mean_square + c.eps)).sqrt()  # (n,)
            live = g_k != 0                                                           # a zero gain flattens the ellipsoid
            u = key / (mean_square[:, None] + c.eps).sqrt()                           # the unit-RMS row before the gain
            on_surface = (k_hat[:, live] / g_k[live]).norm(dim=-1) / u[:, live].norm(dim=-1)
            result["radius_dev"][l, g] = (on_surface - 1).abs().max()
            result["eps_shrink"][l, g] = (1 - radius / math.sqrt(c.d_k)).max()
            result["zero_gains"][l, g] = (~live).sum()
            distinct = _distinct(k_hat, 1e-6 * k_hat.norm(dim=-1).max().item())
            inverse = torch.where(g_k != 0, g_k.pow(-2), torch.zeros_like(g_k))         # D_k^{-2} (0 where g = 0)
            witness = k_hat * inverse                                                 # (n, d_k): D_k^{-2} k̂_j
            scores = witness @ k_hat.T                                                # (n, n): row j = witness j
            own = scores.diagonal()
            rival = scores.masked_fill(~distinct, -math.inf).amax(-1)
            result["witness_gap"][l, g] = ((own - rival) / witness.norm(dim=-1)).min()
            result["distinct"][l, g] = (distinct.any(-1) | (n == 1)).sum() if n > 1 else 1
            base = c.rope_base(l)
            k_rot = rope.rotate(k_hat, positions, base)                               # R_j k̂_j
            w_rot = rope.rotate(witness, positions, base)                             # R_j w_j
            rotated = w_rot @ k_rot.T
            rival = rotated.masked_fill(~distinct, -math.inf).amax(-1)
            result["witness_rotated"][l, g] = (rotated.diagonal() > rival).sum()
        q = trace.rotated_query.double()                                              # (h, n, d_k)
        k = trace.rotated_key.double().repeat_interleave(c.h // c.h_kv, 0)
        s = q @ k.transpose(-2, -1)                                                   # (h, n, n)
        top = s.argmax(-1)                                                            # (h, n)
        top2 = s.topk(2, dim=-1).values
        strict = top2[..., 0] > top2[..., 1]
        for i in range(c.h):
            result["text_selected"][l, i] = top[i][strict[i]].unique().numel()
    return result


# --- G2 -------------------------------------------------------------------------------------------

def fused_form(model, ids: Tensor, out=None) -> dict[str, Tensor]:
    r"""G2 on one text (float64 from the model's float32 normalised inputs ``x``). Per block and query
    head ``(layers, h)``:

    ``fused_error``  largest |s_fused − s_model| / max|s_model| over the pairs at offset 0 (t = j), with
                     :math:`s_\text{fused} = c\, x_t W x_t^\top/(\rho_q\rho_k)` through the fused d × d matrix
                     :math:`W = W_Q \operatorname{diag}(g_q \circ g_k) W_K^\top` and :math:`s_\text{model}` the model's
                     float64 scores (QK-norm, rotation, product) from the same x
    ``rotated_error`` the same over every causal pair, :math:`c\,(x_t W_Q D_q/\rho_q) R_{j-t} (x_j W_K D_k/\rho_k)^\top`
    ``fused_sigma``  ``(layers, h, d_k)`` singular values of :math:`W_Q D_q D_k W_K^\top` (offset 0)
    ``plain_sigma``  ``(layers, h, d_k)`` singular values of :math:`W_Q W_K^\top` (the gains left out)
    ``inv_rho_q``    ``(layers, h, n)`` the per-token factors :math:`1/\rho_q(x_t)`; ``inv_rho_k`` ``(layers, h_kv, n)``
    """
    from attnref.models.gemma3 import forward
    from attnref.qknorm import qk_rms_norm

    c = model.config
    if out is None:
        with torch.no_grad():
            out = forward(model, ids, logits=False)
    L, n = len(model.layers), ids.shape[-1]
    group = c.h // c.h_kv
    result = {"fused_error": torch.zeros(L, c.h, dtype=torch.float64),
              "rotated_error": torch.zeros(L, c.h, dtype=torch.float64),
              "fused_sigma": torch.zeros(L, c.h, c.d_k, dtype=torch.float64),
              "plain_sigma": torch.zeros(L, c.h, c.d_k, dtype=torch.float64),
              "inv_rho_q": torch.zeros(L, c.h, n, dtype=torch.float64),
              "inv_rho_k": torch.zeros(L, c.h_kv, n, dtype=torch.float64)}
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    for l, block in enumerate(out.blocks):
        w = model.layers[l]
        x = block.trace.attention_input.double()                                      # (n, d)
        g_q, g_k = _gains(model, l)
        w_q = w.w_q.double().unflatten(1, (c.h, c.d_k)).permute(1, 0, 2)              # (h, d, d_k)
        w_k = w.w_k.double().unflatten(1, (c.h_kv, c.d_k)).permute(1, 0, 2)           # (h_kv, d, d_k)
        q, k = x @ w_q, x @ w_k                                                      # (h, n, d_k), (h_kv, n, d_k)
        rho_q = (q.pow(2).mean(-1) + c.eps).sqrt()                                    # (h, n)
        rho_k = (k.pow(2).mean(-1) + c.eps).sqrt()                                    # (h_kv, n)
        result["inv_rho_q"][l], result["inv_rho_k"][l] = 1 / rho_q, 1 / rho_k
        base = c.rope_base(l)
        # the model's path in float64: QK-norm, rotation, product
        q_model = rope.rotate(qk_rms_norm(q, w.q_norm.double(), eps=c.eps), None, base)
        k_model = rope.rotate(qk_rms_norm(k, w.k_norm.double(), eps=c.eps), None, base)
        s_model = c.scale * q_model @ k_model.repeat_interleave(group, 0).transpose(-2, -1)   # (h, n, n)
        diagonal = torch.arange(n)
        for i in range(c.h):
            kv = i // group
            fused_q = w_q[i] * g_q                                                    # (d, d_k): W_Q D_q
            fused_k = w_k[kv] * g_k                                                   # (d, d_k): W_K D_k
            fused = fused_q @ fused_k.T                                               # (d, d): W_Q diag(g_q ∘ g_k) W_Kᵀ
            s_fused = c.scale * (x @ fused * x).sum(-1) / (rho_q[i] * rho_k[kv])      # (n,): offset 0, s_tt
            scale = s_model[i][causal].abs().max()
            result["fused_error"][l, i] = (s_fused - s_model[i][diagonal, diagonal]).abs().max() / scale
            # every causal offset j − t: x_t W_Q D_q R_{j−t} D_k W_Kᵀ x_jᵀ / (ρ_q ρ_k), R applied to the factors
            left = (x @ fused_q) / rho_q[i][:, None]                                  # (n, d_k)
            right = (x @ fused_k) / rho_k[kv][:, None]                                # (n, d_k)
            s_rotated = c.scale * rope.rotate(left, None, base) @ rope.rotate(right, None, base).T
            result["rotated_error"][l, i] = (s_rotated - s_model[i])[causal].abs().max() / scale
            core = torch.linalg.qr(fused_q).R @ torch.linalg.qr(fused_k).R.T          # W = Q_1 (R_1 R_2ᵀ) Q_2ᵀ
            result["fused_sigma"][l, i] = torch.linalg.svdvals(core)
            plain = torch.linalg.qr(w_q[i]).R @ torch.linalg.qr(w_k[kv]).R.T
            result["plain_sigma"][l, i] = torch.linalg.svdvals(plain)
    return result


# --- G4 -------------------------------------------------------------------------------------------

def distance_mass(model, ids: Tensor, out=None, edges=DISTANCE_EDGES) -> dict[str, Tensor]:
    """G4 on one text of n tokens. ``distance_mass`` ``(layers, h, bins)``: the attention mass at
    distance t − j in each bin of ``edges`` (the last bin open), averaged over the query rows
    t ≥ window (rows that have keys beyond the window); ``beyond_window`` ``(layers, h)``: the mass at
    distance ≥ window over those rows (exactly 0 in a sliding block); ``mean_distance`` ``(layers, h)``."""
    from attnref.models.gemma3 import forward

    c = model.config
    n = ids.shape[-1]
    if n <= c.window:
        raise ValueError(f"distance_mass needs a text longer than the window ({c.window} tokens), got n = {n}")
    if out is None:
        with torch.no_grad():
            out = forward(model, ids, logits=False)
    distance = torch.arange(n)[:, None] - torch.arange(n)[None, :]                  # (n, n): t − j
    bounds = list(edges) + [n + 1]
    rows = slice(c.window, n)
    mass = torch.zeros(len(model.layers), c.h, len(edges), dtype=torch.float64)
    beyond = torch.zeros(len(model.layers), c.h, dtype=torch.float64)
    mean = torch.zeros(len(model.layers), c.h, dtype=torch.float64)
    for l, block in enumerate(out.blocks):
        p = block.weights.double()[:, rows]                                          # (h, rows, n)
        dist = distance[rows]
        for b in range(len(edges)):
            inside = (dist >= bounds[b]) & (dist < bounds[b + 1])
            mass[l, :, b] = (p * inside).sum(-1).mean(-1)
        beyond[l] = (p * (dist >= c.window)).sum(-1).mean(-1)
        mean[l] = (p * dist.clamp_min(0)).sum(-1).mean(-1)
    return {"distance_mass": mass, "beyond_window": beyond, "mean_distance": mean}


# --- storing --------------------------------------------------------------------------------------

def source_hash(root: Path) -> str:
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update(name.encode())
        digest.update((root / name).read_bytes())
    return digest.hexdigest()


def data_root() -> Path:
    for candidate in (ROOT, Path.cwd(), Path.cwd().parent):
        if (candidate / DATA).with_suffix(".npz").exists():
            return candidate
    return ROOT


def save(root: Path, arrays: dict[str, Tensor], provenance: dict) -> None:
    import numpy as np
    path = root / DATA
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path.with_suffix(".npz"), **{k: v.numpy() for k, v in arrays.items()})
    path.with_suffix(".json").write_text(json.dumps(provenance, indent=1, sort_keys=True) + "\n")


class StaleMeasurements(RuntimeError):
    pass


def load(root: Path | None = None, sources: Path = ROOT) -> tuple[dict[str, Tensor], dict]:
    """The stored measurements and their provenance; a missing file or one measured with other code
    raises one line naming ``make measure-gemma``."""
    import numpy as np
    root = data_root() if root is None else root
    path = root / DATA
    if not path.with_suffix(".npz").exists() or not path.with_suffix(".json").exists():
        raise StaleMeasurements(f"{DATA}.npz is missing: run `make measure-gemma` (a few minutes)")
    provenance = json.loads(path.with_suffix(".json").read_text())
    current = source_hash(sources)
    if provenance.get("source_sha256") != current:
        raise StaleMeasurements(f"{DATA}.npz was measured with other code (source hash "
                                f"{provenance.get('source_sha256', '?')[:12]} ≠ {current[:12]}): run `make measure-gemma`")
    with np.load(path.with_suffix(".npz")) as data:
        arrays = {k: torch.from_numpy(data[k]) for k in data.files}
    return arrays, provenance
