r"""What chapter 6 measures on the trained decoder (SmolLM2-135M-Instruct), stored for the notebook.

Reading the 4-bit file and running 30 blocks over the text set takes longer than a notebook may
(≈ 10 s to load, several seconds per pass on one core), so ``make measure`` runs
:func:`measure` once and stores its raw per-sentence sums with their provenance
(``data/smollm2-measurements.npz`` and ``.json``); the notebook computes its statistics,
intervals and verdicts from them in a fraction of a second. ``make test`` notices drift:
``tests/test_decoder_measure.py`` re-measures two sentences with the current code and compares,
and fails when the source of the code that produced the numbers changed since they were stored.

Per sentence ``s`` (its real tokens only), layer ``l`` (block ``l`` reads ``H^(l)``) and query
head ``i`` (key head ``g(i) = i // (h / h_kv)``), sums over the rows a causal softmax sees
(query token ``t`` with keys ``j ≤ t``, rows with at least two keys):

``rows``                 number of such rows
``within_pre``           Σ over rows of the variance over keys of ``q·k`` before rotation
``within_post``          the same for the rotated (actual) logits ``q̃·k̃``
``dot_cos``, ``cos_sq``, ``dot_sq``   Σ over allowed pairs of (q̃·k̃)(cos), cos², (q̃·k̃)² (dot vs cosine)
``q_norm``, ``q_norm_sq``, ``k_norm``, ``k_norm_sq``   Σ over tokens of ‖q‖, ‖q‖², ‖k‖, ‖k‖² (k per key head)
``ln_norm``, ``ln_norm_sq``, ``ln_dev``   Σ of ‖RMSNorm(h)‖ and its square (with the gain), and the
                         largest |‖RMSNorm(h)‖/√d − 1| without the gain
``stream_sq``, ``attention_sq``, ``ffn_sq``   Σ of ‖H^(l)‖², ‖attention update‖², ‖FFN update‖²
``spread_sq``, ``total_sq``   ‖H^(l) − 1 h̄ᵀ‖_F² and ‖H^(l)‖_F² (D1's residual), l = 0 … 30
``cos_sum``, ``pairs``   Σ of the cosines between distinct tokens of H^(l), and their number
``grad_attention_sq``, ``grad_ffn_sq``   (first :data:`GRADIENT_SENTENCES` sentences) ‖∂ℓ/∂θ‖² per block for the attention weights (W_Q, W_K, W_V,
                         W_O) and the FFN weights, ℓ the sentence's mean next-token cross-entropy
``loss``                 that mean cross-entropy (nats per token)
``pure_spread_sq``, ``pure_total_sq``   D1's residual along the attention-only path without skips:
                         ``Y^(0) = H^(0)``, ``Y^(l) = GQA_l(RMSNorm_l(Y^(l−1)))`` with the model's weights
``free_spread_sq``, ``free_total_sq``   the same path with the same weights but **without the causal
                         mask** (every token attends to every token): D1's control for the mask
``sink_mass``            (A1) Σ over query rows t ≥ 1 of the attention weight on the first token, per head
``value_first_norm``, ``value_other_norm``   (A1) ‖v_0‖ and Σ_{j≥1} ‖v_j‖ of each key/value head's value vectors
``first_sq``             (A1) ‖h_0^(l)‖², the first token's squared norm in the residual stream, l = 0 … 30

A3 (:func:`semantic_measure`, :mod:`attnref.analysis.semantic`): ``semantic_mean`` ``(layers + 1, d)`` and
``semantic_directions`` ``(layers + 1, D, d)``, the mean and top ``D = ⌈d/100⌉`` principal directions of
the stream vectors of the text set (every token but the first); ``semantic_raw`` and
``semantic_removed`` ``(K, K, layers + 1)``, the mean cosines ``S[k, k']`` between the tokens of the
paraphrase pairs' first and second sentences (first tokens left out), before and after removing
them; ``semantic_token_ids``, ``semantic_lengths`` the pairs' tokens (first sentences, then second).

Pairs of sentences (A2, :func:`pair_sums`): ``pair_cos``, ``pair_cos_sq`` ``(S, S, layers + 1)``, the sum
over the tokens i of sentence s and j of sentence s' of cos(h_i^(l), h_j^(l)) and of its square.

C9 on the long text (:func:`long_text_hull`): ``hull_distance``, ``hull_key_scale``, ``hull_top_gap``,
``hull_centroid_distance``, ``hull_centroid_gap``, ``hull_random_distance``: which rotated keys lie in the convex hull of the others, and whether a
query of the text gives them the largest score.

Weights (no text): the singular values of ``W(t) = W_Q^i R_t W_K^{g(i)ᵀ}`` for offsets ``t`` of
:data:`OFFSETS` and ``‖W(t) − W(0)‖_F / ‖W(0)‖_F``.

Sensitivity to the 4-bit rounding (:func:`requantised`): every 4-bit weight moved again by noise
of the rounding's own size (uniform on ± half its block's step ``d_b``, read from the file), for
:data:`REQUANT_DRAWS` draws; ``requant_sigma`` ``(draws, layers, h, d_k)`` (the spectrum of W(0)) and,
on the first :data:`REQUANT_SENTENCES` sentences, ``requant_<name>`` ``(draws, sentences, …)`` for the
sums in :data:`REQUANT_SUMS`, beside the same sums of the model as stored.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import torch

from attnref import rope
from attnref.decoder import rms_norm

Tensor = torch.Tensor

#: Relative offsets t at which the per-head family W(t) = W_Q R_t W_Kᵀ is measured.
OFFSETS = (0, 1, 2, 4, 8, 32, 128)
#: The source files whose code produces the stored numbers (their hash is stored with them).
SOURCES = ("attnref/decoder.py", "attnref/blocks.py", "attnref/rope.py", "attnref/attention.py", "attnref/models/smollm.py",
           "attnref/analysis/decoder_measure.py", "attnref/analysis/texts.py", "attnref/analysis/semantic.py")
DATA = Path("data") / "smollm2-measurements"
#: The folder that holds the ``attnref`` package: the repository (editable install), or
#: site-packages (a wheel); :data:`SOURCES` are read from it.
ROOT = Path(__file__).resolve().parents[2]


def data_root() -> Path:
    """Where ``data/`` is: the repository, or — for the notebooks of the download bundle, run from
    its ``notebooks/`` folder — the working directory or its parent."""
    for candidate in (ROOT, Path.cwd(), Path.cwd().parent):
        if (candidate / DATA).with_suffix(".npz").exists():
            return candidate
    return ROOT
#: Q4_1 stores a block of 32 weights as d·q + m (q in 0…15, d and m in float16) rounded to nearest:
#: each dequantized weight is within d·(1/2 + 15·2⁻¹¹) + |m|·2⁻¹¹ of the weight it replaced.
FP16_UNIT = 2.0 ** -11


def source_hash(root: Path) -> str:
    """SHA-256 of the sources in :data:`SOURCES` (the code that produced the numbers)."""
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update(name.encode())
        digest.update((root / name).read_bytes())
    return digest.hexdigest()


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


# --- weights -------------------------------------------------------------------------------------

def head_factors(model, layer: int) -> tuple[Tensor, Tensor]:
    """``W_Q`` per query head ``(h, d, d_k)`` and ``W_K`` per query head ``(h, d, d_k)`` (the shared
    key head of each group repeated), float64."""
    c = model.config
    w = model.layers[layer]
    w_q = w.w_q.double().unflatten(1, (c.h, c.d_k)).permute(1, 0, 2)          # (d, h·d_k) -> (h, d, d_k)
    w_k = w.w_k.double().unflatten(1, (c.h_kv, c.d_k)).permute(1, 0, 2)       # (h_kv, d, d_k)
    return w_q, w_k.repeat_interleave(c.h // c.h_kv, dim=0)                    # (h, d, d_k) each


def family_spectra(model, offsets=OFFSETS) -> dict[str, Tensor]:
    """Singular values of W(t) = W_Q R_t W_Kᵀ per (layer, head, offset), and the relative change
    ‖W(t) − W(0)‖_F / ‖W(0)‖_F. With W_Q = Q_1 R_1, W_K = Q_2 R_2 (QR), W(t) = Q_1 (R_1 R_t R_2ᵀ) Q_2ᵀ:
    its singular values are those of the d_k × d_k core."""
    c = model.config
    sigma = torch.zeros(len(model.layers), c.h, len(offsets), c.d_k, dtype=torch.float64)
    change = torch.zeros(len(model.layers), c.h, len(offsets), dtype=torch.float64)
    rotations = torch.stack([rope.rotation_matrix(t, c.d_k, c.rope_base, dtype=torch.float64) for t in offsets])
    for l in range(len(model.layers)):
        w_q, w_k = head_factors(model, l)
        r_q = torch.linalg.qr(w_q).R                                            # (h, d_k, d_k)
        r_k = torch.linalg.qr(w_k).R
        cores = r_q[:, None] @ rotations[None] @ r_k.transpose(-2, -1)[:, None]  # (h, T, d_k, d_k)
        sigma[l] = torch.linalg.svdvals(cores)
        change[l] = (cores - cores[:, :1]).flatten(-2).norm(dim=-1) / cores[:, :1].flatten(-2).norm(dim=-1)
    return {"family_sigma": sigma, "family_change": change}


#: The 4-bit tensors of a block, as (GGUF name, attnref field, heads whose rows GGUF permutes or 0).
QUANTISED = (("attn_q", "w_q", "h"), ("attn_k", "w_k", "h_kv"), ("attn_v", "w_v", None),
             ("attn_output", "w_o", None), ("ffn_gate", "w_gate", None), ("ffn_up", "w_up", None),
             ("ffn_down", "w_down", None))
#: Draws of the re-rounding noise, and the sentences each perturbed model is run on.
REQUANT_DRAWS = 2
REQUANT_SENTENCES = 16
#: The per-sentence sums measured again on each perturbed model.
REQUANT_SUMS = ("rows", "within_post", "ln_norm", "ln_norm_sq", "dot_cos", "cos_sq", "dot_sq", "sink_mass")


def block_steps(path: Path, layers: int) -> dict[tuple[int, str], Tensor]:
    """The rounding step ``d_b`` of every 4-bit weight, per (layer, attnref field), in attnref's layout
    (``(in, out)``, the rows of ``W_Q``/``W_K`` un-permuted as the loader does): Q4_1 stores a block of
    32 weights as ``d_b·q + m_b`` (q in 0…15) rounded to nearest, so its rounding error is at most
    ``d_b/2`` (plus the float16 rounding of ``d_b, m_b``, :data:`FP16_UNIT` relative)."""
    import gguf
    import numpy as np

    from attnref.models.smollm import _field, unpermute

    reader = gguf.GGUFReader(str(path))
    tensors = {t.name: t for t in reader.tensors}
    heads = {"h": int(_field(reader, "llama.attention.head_count")),
             "h_kv": int(_field(reader, "llama.attention.head_count_kv"))}
    out = {}
    for l in range(layers):
        for gguf_name, field, permuted in QUANTISED:
            t = tensors[f"blk.{l}.{gguf_name}.weight"]
            if t.tensor_type != gguf.GGMLQuantizationType.Q4_1:
                raise ValueError(f"{t.name}: expected Q4_1 blocks, found {t.tensor_type.name}")
            blocks = np.asarray(t.data).reshape(t.data.shape[0], -1, 20)            # (rows, blocks, 20 bytes)
            step = torch.from_numpy(blocks[..., 0:2].copy().view(np.float16).astype(np.float32)[..., 0])
            step = step.repeat_interleave(32, dim=1)                               # (out, in): one per weight
            if permuted is not None:
                step = unpermute(step, heads[permuted])
            out[(l, field)] = step.T.contiguous()                                  # (in, out) as attnref stores it
    return out


def requantised(model, steps: dict[tuple[int, str], Tensor], generator: torch.Generator):
    """A copy of ``model`` whose 4-bit weights moved by ``d_b·U(−½, ½)`` each, independently: a second
    rounding error of the size the file's own rounding made (the embedding, 8-bit, is kept)."""
    import dataclasses

    from attnref.models.smollm import SmolLM

    layers = []
    for l, layer in enumerate(model.layers):
        changes = {}
        for _, field, _ in QUANTISED:
            w = getattr(layer, field)
            noise = torch.rand(w.shape, generator=generator, dtype=torch.float32) - 0.5
            changes[field] = w + steps[(l, field)].to(w.dtype) * noise.to(w.dtype)
        layers.append(dataclasses.replace(layer, **changes))
    return SmolLM(model.config, model.embedding, layers, model.final_norm)


def requant_sensitivity(model, path: Path, token_ids: list[list[int]], seed: int = 0,
                        draws: int = REQUANT_DRAWS, sentences: int = REQUANT_SENTENCES) -> dict[str, Tensor]:
    """``requant_sigma`` and ``requant_<name>`` of the module docstring (float32 runs, as the model)."""
    steps = block_steps(path, len(model.layers))
    generator = torch.Generator().manual_seed(seed)
    sigma, sums = [], []
    for _ in range(draws):
        noisy = requantised(model, steps, generator)
        sigma.append(family_spectra(noisy, offsets=(0,))["family_sigma"][:, :, 0])    # (layers, h, d_k)
        with torch.no_grad():
            per = [_sums_for_sentence(noisy, torch.tensor(ids, dtype=torch.int64),
                                       attention_only=False)
                   for ids in token_ids[:sentences]]
        sums.append({name: torch.stack([p[name] for p in per]) for name in REQUANT_SUMS})
    out = {"requant_sigma": torch.stack(sigma)}
    out.update({f"requant_{name}": torch.stack([s[name] for s in sums]) for name in REQUANT_SUMS})
    return out


# --- activations ---------------------------------------------------------------------------------

def _sums_for_sentence(model, ids: Tensor, attention_only: bool = True, units: list | None = None,
                       states: list | None = None) -> dict[str, Tensor]:
    """The per-sentence sums of the module docstring, for one sentence ``ids`` (n,); ``attention_only=False``
    skips the attention-only paths; ``units`` (a list) receives the unit vectors of H^(0) … H^(L),
    ``(layers + 1, n, d)`` float64, for :func:`pair_sums`; ``states`` the vectors themselves."""
    from attnref.decoder import decoder_block, grouped_query_attention

    c = model.config
    n = ids.shape[0]
    L = len(model.layers)
    out = {name: torch.zeros(L, c.h, dtype=torch.float64) for name in
           ("rows", "within_pre", "within_post", "dot_cos", "cos_sq", "dot_sq", "q_norm", "q_norm_sq")}
    out.update({name: torch.zeros(L, c.h_kv, dtype=torch.float64) for name in
                ("k_norm", "k_norm_sq", "value_first_norm", "value_other_norm")})
    out["sink_mass"] = torch.zeros(L, c.h, dtype=torch.float64)
    out.update({name: torch.zeros(L, dtype=torch.float64) for name in
                ("ln_norm", "ln_norm_sq", "ln_dev", "attention_sq", "ffn_sq")})
    out.update({name: torch.zeros(L + 1, dtype=torch.float64) for name in
                ("stream_sq", "spread_sq", "total_sq", "cos_sum", "pairs", "pure_spread_sq", "pure_total_sq",
                 "free_spread_sq", "free_total_sq", "first_sq")})
    unit_vectors, state_vectors = [], []
    allowed = torch.ones(n, n, dtype=torch.bool).tril(-1) | torch.eye(n, dtype=torch.bool)   # j ≤ t
    lower = torch.ones(n, n, dtype=torch.bool).tril(-1)                                     # distinct pairs
    enough = allowed.sum(-1) >= 2                                                            # rows with ≥ 2 keys

    def stream_stats(index: int, x: Tensor) -> None:
        x64 = x.double()
        out["stream_sq"][index] = x64.pow(2).sum()
        out["total_sq"][index] = x64.pow(2).sum()
        out["spread_sq"][index] = (x64 - x64.mean(0, keepdim=True)).pow(2).sum()
        out["first_sq"][index] = x64[0].pow(2).sum()
        unit = x64 / x64.norm(dim=-1, keepdim=True)
        unit_vectors.append(unit)
        state_vectors.append(x64)
        out["cos_sum"][index] = (unit @ unit.T)[lower].sum()
        out["pairs"][index] = lower.sum()

    x = model.embedding[ids]                                                                # (n, d)
    stream_stats(0, x)
    pure = x.double()                                                                       # attention only, no skips
    out["pure_spread_sq"][0] = (pure - pure.mean(0, keepdim=True)).pow(2).sum()
    out["pure_total_sq"][0] = pure.pow(2).sum()
    free = pure.clone()                                                                     # the same, no causal mask
    out["free_spread_sq"][0], out["free_total_sq"][0] = out["pure_spread_sq"][0], out["pure_total_sq"][0]
    for l, layer in enumerate(model.layers):
        normalised = rms_norm(x, layer.attention_norm, c.eps)
        plain = rms_norm(x.double(), None, c.eps)                                           # without the gain
        out["ln_dev"][l] = (plain.norm(dim=-1) / math.sqrt(c.d) - 1).abs().max()
        norms = normalised.double().norm(dim=-1)
        out["ln_norm"][l], out["ln_norm_sq"][l] = norms.sum(), norms.pow(2).sum()
        block = decoder_block(x, weights=layer, config=c, causal=True)
        trace, att = block.trace, block.trace.attention
        q, k = att.trace.query.double(), att.trace.key.double()                             # (h, n, d_k), (h_kv, n, d_k)
        q_rot, k_rot = att.trace.rotated_query.double(), att.trace.rotated_key.double()
        group = c.h // c.h_kv
        k_shared, k_rot_shared = k.repeat_interleave(group, 0), k_rot.repeat_interleave(group, 0)
        for name, a, b in (("within_pre", q, k_shared), ("within_post", q_rot, k_rot_shared)):
            dots = a @ b.transpose(-2, -1)                                                  # (h, n, n)
            masked = dots.masked_fill(~allowed, 0.0)
            count = allowed.sum(-1).double()                                               # keys per row
            mean = masked.sum(-1) / count
            var = (masked.pow(2).sum(-1) / count - mean.pow(2)) * count / (count - 1).clamp(min=1)
            out[name][l] = var[:, enough].sum(-1)
            if name == "within_post":
                cos = dots / (a.norm(dim=-1, keepdim=True) * b.norm(dim=-1).unsqueeze(-2))
                out["dot_cos"][l] = (dots * cos)[:, allowed].sum(-1)
                out["cos_sq"][l] = cos.pow(2)[:, allowed].sum(-1)
                out["dot_sq"][l] = dots.pow(2)[:, allowed].sum(-1)
        out["rows"][l] = enough.sum()
        out["q_norm"][l], out["q_norm_sq"][l] = q.norm(dim=-1).sum(-1), q.pow(2).sum((-1, -2))
        out["k_norm"][l], out["k_norm_sq"][l] = k.norm(dim=-1).sum(-1), k.pow(2).sum((-1, -2))
        out["attention_sq"][l] = trace.attention_update.double().pow(2).sum()
        out["ffn_sq"][l] = trace.ffn_update.double().pow(2).sum()
        out["sink_mass"][l] = att.weights.double()[:, 1:, 0].sum(-1)                        # (h,): rows t ≥ 1
        value = (normalised @ layer.w_v).double().unflatten(-1, (c.h_kv, c.d_k)).transpose(0, 1)  # (h_kv, n, d_k)
        value_norms = value.norm(dim=-1)                                                   # (h_kv, n)
        out["value_first_norm"][l], out["value_other_norm"][l] = value_norms[:, 0], value_norms[:, 1:].sum(-1)
        x = block.output
        stream_stats(l + 1, x)
        if not attention_only:
            continue
        pure = grouped_query_attention(rms_norm(pure, layer.attention_norm.double(), c.eps),
                                       weights=layer.to(dtype=torch.float64), config=c, causal=True).output
        out["pure_spread_sq"][l + 1] = (pure - pure.mean(0, keepdim=True)).pow(2).sum()
        out["pure_total_sq"][l + 1] = pure.pow(2).sum()
        free = grouped_query_attention(rms_norm(free, layer.attention_norm.double(), c.eps),
                                       weights=layer.to(dtype=torch.float64), config=c, causal=False).output
        out["free_spread_sq"][l + 1] = (free - free.mean(0, keepdim=True)).pow(2).sum()
        out["free_total_sq"][l + 1] = free.pow(2).sum()
    if units is not None:
        units.append(torch.stack(unit_vectors))
    if states is not None:
        states.append(torch.stack(state_vectors))
    return out


def pair_sums(units: list[Tensor]) -> dict[str, Tensor]:
    """From each sentence's unit vectors ``(layers + 1, n_s, d)``: ``pair_cos`` and ``pair_cos_sq``
    ``(S, S, layers + 1)``, the sums over token pairs (i in sentence s, j in s') of the cosine and of
    its square (A2 uses s ≠ s')."""
    sentence = torch.cat([torch.full((u.shape[1],), s) for s, u in enumerate(units)])   # (N,)
    member = torch.nn.functional.one_hot(sentence, len(units)).double()                 # (N, S)
    everything = torch.cat(units, dim=1)                                                # (layers + 1, N, d)
    pair_cos, pair_cos_sq = [], []
    for layer in everything:                                                            # (N, d)
        cos = layer @ layer.T                                                           # (N, N)
        pair_cos.append(member.T @ cos @ member)                                        # (S, S)
        pair_cos_sq.append(member.T @ cos.pow(2) @ member)
    return {"pair_cos": torch.stack(pair_cos, -1), "pair_cos_sq": torch.stack(pair_cos_sq, -1)}


def semantic_directions(states: list[Tensor]) -> dict[str, Tensor]:
    """A3's baseline from each sentence's stream vectors ``(layers + 1, n_s, d)``: the mean and the
    top ``⌈d/100⌉`` principal directions per stage over every token but the first (the sink)."""
    from attnref.analysis import semantic

    kept = torch.cat([x[:, 1:] for x in states], dim=1)                                 # (layers + 1, N, d)
    total, outer = kept.sum(1), kept.transpose(-2, -1) @ kept                           # (…, d), (…, d, d)
    mean, directions = semantic.common_directions(total, outer, kept.shape[1],
                                                  semantic.directions_count(kept.shape[-1]))
    return {"semantic_mean": mean, "semantic_directions": directions}


def semantic_measure(model, first_ids: list[list[int]], second_ids: list[list[int]], mean: Tensor,
                     directions: Tensor) -> dict[str, Tensor]:
    """A3 on the paraphrase pairs: the stream vectors of every sentence (first token left out), and
    ``semantic_raw`` / ``semantic_removed`` ``(K, K, layers + 1)``: :func:`semantic.pair_cosines` at each
    stage before and after :func:`semantic.remove_common` with ``mean`` and ``directions``."""
    from attnref.analysis import semantic

    def stages(ids: list[int]) -> Tensor:                                               # (layers + 1, n − 1, d)
        states: list[Tensor] = []
        with torch.no_grad():
            _sums_for_sentence(model, torch.tensor(ids, dtype=torch.int64), attention_only=False, states=states)
        return states[0][:, 1:]

    first, second = [stages(ids) for ids in first_ids], [stages(ids) for ids in second_ids]
    ids_a = [torch.tensor(ids[1:]) for ids in first_ids]
    ids_b = [torch.tensor(ids[1:]) for ids in second_ids]
    raw, removed = [], []
    for l in range(mean.shape[0]):
        raw.append(semantic.pair_cosines([x[l] for x in first], ids_a, [x[l] for x in second], ids_b))
        clean = lambda x: semantic.remove_common(x[l], mean[l], directions[l])
        removed.append(semantic.pair_cosines([clean(x) for x in first], ids_a, [clean(x) for x in second], ids_b))
    everything = [t for ids in (*first_ids, *second_ids) for t in ids]
    return {"semantic_raw": torch.stack(raw, -1), "semantic_removed": torch.stack(removed, -1),
            "semantic_token_ids": torch.tensor(everything, dtype=torch.int64),
            "semantic_lengths": torch.tensor([len(ids) for ids in (*first_ids, *second_ids)], dtype=torch.int64)}


ATTENTION_WEIGHTS = ("w_q", "w_k", "w_v", "w_o")
FFN_WEIGHTS = ("w_gate", "w_up", "w_down")


def _gradient_norms(model, ids: Tensor) -> dict[str, Tensor]:
    """Per block, the squared norm of the gradient of the sentence's mean next-token cross-entropy
    with respect to the block's attention weights and its FFN weights (float32, as the model runs)."""
    from attnref.models.smollm import forward

    params = [[getattr(layer, name).requires_grad_(True) for name in ATTENTION_WEIGHTS + FFN_WEIGHTS]
              for layer in model.layers]
    try:
        logits = forward(model, ids).logits                                     # (n, vocab)
        loss = torch.nn.functional.cross_entropy(logits[:-1], ids[1:])
        grads = torch.autograd.grad(loss, [p for block in params for p in block])
    finally:
        for block in params:
            for p in block:
                p.requires_grad_(False)
    k = len(ATTENTION_WEIGHTS)
    per_block = [grads[i:i + len(ATTENTION_WEIGHTS + FFN_WEIGHTS)]
                 for i in range(0, len(grads), len(ATTENTION_WEIGHTS + FFN_WEIGHTS))]
    return {"grad_attention_sq": torch.tensor([sum(g.double().pow(2).sum() for g in b[:k]) for b in per_block]),
            "grad_ffn_sq": torch.tensor([sum(g.double().pow(2).sum() for g in b[k:]) for b in per_block]),
            "loss": torch.tensor(loss.item(), dtype=torch.float64)}


#: Gradients (a backward pass through the 49152-word output layer) cost several times a forward
#: pass: they are measured on the first sentences only.
GRADIENT_SENTENCES = 16


def measure_sentences(model, token_ids: list[list[int]], progress=None,
                      gradients: int = GRADIENT_SENTENCES, states: list | None = None) -> dict[str, Tensor]:
    """:func:`_sums_for_sentence` for every sentence, stacked along a first dimension, and
    :func:`_gradient_norms` for the first ``gradients`` sentences (arrays ``grad_*``, ``loss``);
    ``states`` (a list) receives each sentence's stream vectors (for :func:`semantic_directions`)."""
    rows, grads, units = [], [], []
    states = [] if states is None else states
    for i, ids in enumerate(token_ids):
        ids = torch.tensor(ids, dtype=torch.int64)
        with torch.no_grad():
            rows.append(_sums_for_sentence(model, ids, units=units, states=states))
        if i < gradients:
            grads.append(_gradient_norms(model, ids))
        if progress is not None:
            progress(i + 1, len(token_ids))
    out = {name: torch.stack([r[name] for r in rows]) for name in rows[0]}
    out.update(pair_sums(units))
    if grads:
        out.update({name: torch.stack([g[name] for g in grads]) for name in grads[0]})
    return out


def long_text_logit_spectra(model, ids: list[int]) -> Tensor:
    """Singular values of each head's full (pre-mask) logit matrix Q̃ K̃ᵀ on one long text,
    ``(layers, h, n)``: with n > d_k at most d_k of them can be non-zero (H7)."""
    from attnref.decoder import decoder_block

    c = model.config
    x = model.embedding[torch.tensor(ids, dtype=torch.int64)]
    spectra = []
    with torch.no_grad():
        for layer in model.layers:
            block = decoder_block(x, weights=layer, config=c, causal=True)
            q = block.trace.attention.trace.rotated_query.double()
            k = block.trace.attention.trace.rotated_key.double().repeat_interleave(c.h // c.h_kv, 0)
            spectra.append(torch.linalg.svdvals(q @ k.transpose(-2, -1)))                  # (h, n)
            x = block.output
    return torch.stack(spectra)


#: Random-key baseline of C9's count: draws of n standard normal keys in d_k dimensions.
HULL_RANDOM_DRAWS = 3


def long_text_hull(model, ids: list[int], seed: int = 0) -> dict[str, Tensor]:
    r"""C9 on one long text: which rotated keys lie in the convex hull of the other keys.

    ``hull_distance`` ``(layers, h_kv, n)``: the distance of each rotated key k̃_j (float64) to the
    convex hull of the other n − 1 rotated keys of its key head (:func:`attnref.analysis.logit_scale.hull_separation`;
    0 up to round-off for a key in that hull, which no query can give the largest score);
    ``hull_key_scale`` ``(layers, h_kv)``: the largest key norm (the scale of the round-off);
    ``hull_top_gap`` ``(layers, h, n)``: over the text's n queries of head i, scored against all n
    keys (no causal mask), the largest ``q̃_t·k̃_j − max_{l≠j} q̃_t·k̃_l`` (> 0 iff some query of
    the text gives key j the largest score); ``hull_centroid_distance`` ``(layers, h_kv)`` and
    ``hull_centroid_gap`` ``(layers, h)``: the same for the mean of the keys, a key inside their hull
    by construction (the control: the hull test must find it at distance 0, and no query give it
    the top score); ``hull_random_distance`` ``(draws, n)``: the same
    distances for :data:`HULL_RANDOM_DRAWS` draws of n standard normal keys in d_k dimensions
    (generator seeded with ``seed``), the baseline."""
    from attnref.analysis.hull import distance_to_hull
    from attnref.analysis.logit_scale import hull_separation
    from attnref.decoder import decoder_block

    c = model.config
    x = model.embedding[torch.tensor(ids, dtype=torch.int64)]
    n = len(ids)
    distance = torch.zeros(len(model.layers), c.h_kv, n, dtype=torch.float64)
    scale = torch.zeros(len(model.layers), c.h_kv, dtype=torch.float64)
    gap = torch.zeros(len(model.layers), c.h, n, dtype=torch.float64)
    centroid_distance = torch.zeros(len(model.layers), c.h_kv, dtype=torch.float64)
    centroid_gap = torch.zeros(len(model.layers), c.h, dtype=torch.float64)
    with torch.no_grad():
        for index, layer in enumerate(model.layers):
            block = decoder_block(x, weights=layer, config=c, causal=True)
            q = block.trace.attention.trace.rotated_query.double()                       # (h, n, d_k)
            k = block.trace.attention.trace.rotated_key.double()                         # (h_kv, n, d_k)
            for g in range(c.h_kv):
                distance[index, g] = hull_separation(k[g])[0]
                scale[index, g] = k[g].norm(dim=-1).max()
                centroid_distance[index, g] = distance_to_hull(k[g].mean(0, keepdim=True), k[g])[0][0]
            scores = q @ k.repeat_interleave(c.h // c.h_kv, 0).transpose(-2, -1)          # (h, n, n)
            top2 = scores.topk(2, dim=-1)
            others = torch.where(torch.arange(n) == top2.indices[..., :1],               # max over l ≠ j
                                 top2.values[..., 1:2], top2.values[..., :1])             # (h, n, n)
            gap[index] = (scores - others).amax(dim=-2)
            centroid = q @ k.mean(1).repeat_interleave(c.h // c.h_kv, 0)[..., None]          # (h, n, 1)
            centroid_gap[index] = (centroid[..., 0] - top2.values[..., 0]).amax(dim=-1)
            x = block.output
    generator = torch.Generator().manual_seed(seed)
    random = torch.stack([hull_separation(torch.randn(n, c.d_k, generator=generator, dtype=torch.float64))[0]
                          for _ in range(HULL_RANDOM_DRAWS)])
    return {"hull_distance": distance, "hull_key_scale": scale, "hull_top_gap": gap,
            "hull_centroid_distance": centroid_distance, "hull_centroid_gap": centroid_gap,
            "hull_random_distance": random}


# --- storing -------------------------------------------------------------------------------------

def save(root: Path, arrays: dict[str, Tensor], provenance: dict) -> None:
    import numpy as np
    path = root / DATA
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path.with_suffix(".npz"), **{k: v.numpy() for k, v in arrays.items()})
    path.with_suffix(".json").write_text(json.dumps(provenance, indent=1, sort_keys=True) + "\n")


class StaleMeasurements(RuntimeError):
    pass


def load(root: Path | None = None, sources: Path = ROOT) -> tuple[dict[str, Tensor], dict]:
    """The stored measurements (under ``root``, default :func:`data_root`) and their provenance;
    a missing file, or one measured with other code than the sources under ``sources``, raises
    one line naming ``make measure``."""
    import numpy as np
    root = data_root() if root is None else root
    path = root / DATA
    if not path.with_suffix(".npz").exists() or not path.with_suffix(".json").exists():
        raise StaleMeasurements(f"{DATA}.npz is missing: run `make measure` (about a minute)")
    provenance = json.loads(path.with_suffix(".json").read_text())
    current = source_hash(sources)
    if provenance.get("source_sha256") != current:
        raise StaleMeasurements(f"{DATA}.npz was measured with other code (source hash "
                                f"{provenance.get('source_sha256', '?')[:12]} ≠ {current[:12]}): run `make measure`")
    with np.load(path.with_suffix(".npz")) as data:
        arrays = {k: torch.from_numpy(data[k]) for k in data.files}
    return arrays, provenance
