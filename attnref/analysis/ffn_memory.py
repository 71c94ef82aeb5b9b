"""Chapter 10, claims K1–K3: the position-wise FFN read as attention over learned key–value slots.

An FFN :math:`\\phi(x W_1 + b_1) W_2 + b_2` is :math:`\\sum_k a_k(x)\\, v_k + b_2` with slot weights
:math:`a_k = \\phi(x \\cdot k_k + b_k)`, keys :math:`k_k` the columns of :math:`W_1` and values
:math:`v_k` the rows of :math:`W_2` (Sukhbaatar et al. 2019; Geva et al. 2021). A gated FFN
(SwiGLU, GeGLU) has :math:`a_k = \\phi(x \\cdot g_k)\\,(x \\cdot u_k)`. This module computes the slot
weights, the slot sum (two ways: one product and an explicit loop over the slots, the reference the
chapter's checks compare with), the softmax-normalised memory layer, and the per-token statistics
that ``tools/measure_ch10.py`` stores for the three trained models (how many slots carry a token's
output, which ones, and the same for attention's weights on the same text).

The rule of K3 (fixed here before the models were measured, :data:`RULE`): a model's slot weights
count as *sparse* when, in the median block, a token needs at most ``sparse_share`` of the d_ff
slots to hold ``mass`` of :math:`\\sum_k |a_k| \\lVert v_k \\rVert` (an even spread needs
``mass`` of them), and as *input-dependent* when, in the median block, the top ``top_fraction`` of
slots of two tokens of different sentences overlap (Jaccard) by at most ``overlap_max`` (one fixed
set of slots for every token: 1).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import torch

from attnref import _validate as check

Tensor = torch.Tensor

#: K3's rule, fixed before the measurement (see the module docstring).
RULE = {"mass": 0.9, "sparse_share": 0.5, "top_fraction": 0.01, "overlap_max": 0.5, "min_support": 8}
#: The share of the support (slots or visible keys) at which the stored mean cumulative-mass curves
#: are read: 0.1 % … 100 %, log-spaced.
CURVE_FRACTIONS = tuple(float(f"{10 ** (-3 + 3 * i / 24):.4g}") for i in range(25))
#: φ of the FFNs of the book's models.
ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")


def activation(name: str):
    """The elementwise function ``name`` (one of :data:`ACTIVATIONS`)."""
    if name == "relu":
        return torch.relu
    if name == "gelu":
        return torch.nn.functional.gelu
    if name == "gelu_tanh":
        return lambda z: torch.nn.functional.gelu(z, approximate="tanh")
    if name == "silu":
        return lambda z: z * torch.sigmoid(z)
    raise ValueError(f"activation must be one of {', '.join(ACTIVATIONS)}, got {name!r}")


def slot_weights(x: Tensor, keys: Tensor, bias: Tensor | None = None, *, activation_name: str = "relu",
                 up: Tensor | None = None) -> Tensor:
    """The slot weights ``a (..., n, d_ff)`` of input ``x (..., n, d)``: ``φ(x·k_k + b_k)`` with
    ``keys (d, d_ff)`` (the columns are the slots' keys), or with ``up (d, d_ff)`` the gated
    ``φ(x·g_k) (x·u_k)`` (``keys`` the gate's columns)."""
    check.floating("x", x, min_dim=1)
    check.floating("keys", keys, exact_dim=2)
    if x.shape[-1] != keys.shape[0]:
        raise ValueError(f"keys must have shape (d, d_ff) with d = {x.shape[-1]} (the width of x "
                         f"{check.shape_of(x)}), got {check.shape_of(keys)}")
    scores = x @ keys                                                    # (..., n, d_ff)
    if bias is not None:
        if tuple(bias.shape) != (keys.shape[1],):
            raise ValueError(f"bias must have shape ({keys.shape[1]},) = (d_ff,), got {check.shape_of(bias)}")
        scores = scores + bias
    weights = activation(activation_name)(scores)
    if up is not None:
        if up.shape != keys.shape:
            raise ValueError(f"up must have the shape of keys {check.shape_of(keys)}, got {check.shape_of(up)}")
        weights = weights * (x @ up)
    return weights


def slot_sum(weights: Tensor, values: Tensor, bias: Tensor | None = None) -> Tensor:
    """``Σ_k a_k v_k (+ b_2)`` as one product: ``weights (..., n, d_ff)``, ``values (d_ff, d)``."""
    check.floating("values", values, exact_dim=2)
    if weights.shape[-1] != values.shape[0]:
        raise ValueError(f"values must have shape (d_ff, d) with d_ff = {weights.shape[-1]} (the slot "
                         f"weights {check.shape_of(weights)}), got {check.shape_of(values)}")
    out = weights @ values
    return out if bias is None else out + bias


def slot_sum_loop(weights: Tensor, values: Tensor, bias: Tensor | None = None) -> Tensor:
    """The same sum slot by slot (``a_k`` times row ``k`` of ``values``, added one at a time): the
    reference the chapter compares :func:`slot_sum` and the models' FFNs with."""
    out = torch.zeros(*weights.shape[:-1], values.shape[1], dtype=weights.dtype)
    for k in range(values.shape[0]):
        out = out + weights[..., k, None] * values[k]
    return out if bias is None else out + bias


def softmax_memory(x: Tensor, keys: Tensor, values: Tensor, bias: Tensor | None = None) -> Tensor:
    """A softmax-normalised FFN: ``softmax(x W_1 + b_1) W_2`` (no scaling), ``(..., n, d)``."""
    scores = x @ keys if bias is None else x @ keys + bias
    return torch.softmax(scores, dim=-1) @ values


def memory_as_attention(x: Tensor, keys: Tensor, values: Tensor, bias: Tensor | None = None):
    """The same layer as attention of the queries ``x`` over ``d_ff`` fixed memories through
    :func:`attnref.scaled_dot_product_attention`: keys ``keys.T``, values ``values``, scale 1 and the
    bias as an additive mask. Returns its :class:`~attnref.attention.AttentionResult`."""
    from attnref.attention import scaled_dot_product_attention
    mask = None if bias is None else bias.expand(*x.shape[:-1], bias.shape[-1])
    return scaled_dot_product_attention(x, keys.T, values, mask=mask, scale=1.0)


# --- per-token statistics of a weighted sum ---------------------------------------------------------

def contributions(weights: Tensor, values: Tensor) -> Tensor:
    """``|a_k| ‖v_k‖``: how much slot ``k`` can move the output, ``(..., d_ff)``."""
    return weights.abs() * values.norm(dim=-1)


def share_needed(mass: Tensor, fraction: float, support: Tensor | int | None = None) -> Tensor:
    """The smallest share of the support whose largest entries of ``mass (..., m)`` (non-negative)
    hold ``fraction`` of its total; ``support`` the entries that count (default ``m``)."""
    ordered = mass.sort(dim=-1, descending=True).values
    cumulative = ordered.cumsum(-1) / ordered.sum(-1, keepdim=True)
    needed = (cumulative < fraction - 1e-12).sum(-1) + 1                 # items until the mass is reached
    size = mass.shape[-1] if support is None else support
    return needed.to(mass.dtype) / size


def effective_share(mass: Tensor, support: Tensor | int | None = None) -> Tensor:
    """``exp(entropy of mass/Σ mass)`` as a share of the support: 1 for an even spread."""
    p = mass / mass.sum(-1, keepdim=True)
    entropy = -(p * p.clamp_min(1e-300).log()).sum(-1)
    size = mass.shape[-1] if support is None else support
    return entropy.exp() / size


def cumulative_curve(mass: Tensor, support: Tensor, fractions=CURVE_FRACTIONS) -> Tensor:
    """Share of the total held by the largest ``ceil(f · support)`` entries, per row and fraction
    ``f``: ``(..., len(fractions))``."""
    ordered = mass.sort(dim=-1, descending=True).values
    cumulative = ordered.cumsum(-1) / ordered.sum(-1, keepdim=True)
    support = torch.as_tensor(support).to(torch.float64)
    out = []
    for f in fractions:
        index = (torch.ceil(f * support - 1e-9).clamp(min=1) - 1).long()
        index = index.expand(cumulative.shape[:-1]) if index.dim() < cumulative.dim() else index
        out.append(cumulative.gather(-1, index[..., None])[..., 0])
    return torch.stack(out, -1)


def top_sets(mass: Tensor, fraction: float) -> Tensor:
    """Indicator ``(..., m)`` of each row's largest ``ceil(fraction · m)`` entries."""
    k = max(1, math.ceil(fraction * mass.shape[-1]))
    chosen = torch.zeros_like(mass, dtype=torch.bool)
    return chosen.scatter(-1, mass.topk(k, dim=-1).indices, True)


def overlap_sums(sets_a: Tensor, sets_b: Tensor) -> Tensor:
    """Sum over every token pair of the Jaccard overlap of two tokens' top sets (equal sizes):
    ``sets_a (n_a, m)``, ``sets_b (n_b, m)`` boolean → a 0-d tensor."""
    a, b = sets_a.double(), sets_b.double()
    inter = a @ b.T                                                      # (n_a, n_b)
    k = a.sum(-1)[:, None]
    return (inter / (2 * k - inter)).sum()


def attention_rows(weights: Tensor, causal: bool, min_support: int = RULE["min_support"]):
    """The rows of one sentence's attention weights ``(h, n, n)`` with at least ``min_support``
    visible keys: ``(rows, n)`` masses and their supports ``(rows,)``."""
    h, n, _ = weights.shape
    support = torch.arange(1, n + 1) if causal else torch.full((n,), n)
    keep = support >= min_support
    rows = weights[:, keep].reshape(-1, n)
    return rows, support[keep].repeat(h)


# --- the stored measurements -----------------------------------------------------------------------

#: The code that defines what is measured (hashed with the numbers). The models' forward passes
#: (attnref's attention, blocks and loaders, edited for other chapters too) are not hashed: the drift
#: test re-measures sentences with the current code instead and fails if the numbers moved.
SOURCES = ("attnref/analysis/ffn_memory.py", "tools/measure_ch10.py", "attnref/analysis/diff_attention.py",
           "attnref/analysis/norms.py", "attnref/analysis/texts.py")
DATA = Path("data") / "ch10-measurements"
ROOT = Path(__file__).resolve().parents[2]
#: The models measured, by the registry's names, and the short key of their arrays.
MODELS = {"all-MiniLM-L6-v2": "minilm", "SmolLM2-135M-Instruct": "smollm2", "Gemma-3-270M": "gemma3"}


class StaleMeasurements(RuntimeError):
    pass


def source_hash(root: Path = ROOT) -> str:
    """SHA-256 of :data:`SOURCES` (the code that produced the stored numbers)."""
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


def load(root: Path | None = None, sources: Path = ROOT) -> tuple[dict[str, Tensor], dict]:
    """The stored measurements and their provenance; a missing file or one measured with other
    code raises one line naming ``make measure-ch10``."""
    import numpy as np
    root = data_root() if root is None else root
    path = root / DATA
    if not path.with_suffix(".npz").exists() or not path.with_suffix(".json").exists():
        raise StaleMeasurements(f"{DATA}.npz is missing: run `make measure-ch10` (a few minutes)")
    provenance = json.loads(path.with_suffix(".json").read_text())
    if (sources / SOURCES[1]).exists():          # a checkout: the code must be the code measured
        current = source_hash(sources)
        if provenance.get("source_sha256") != current:
            raise StaleMeasurements(f"{DATA}.npz was measured with other code (source hash "
                                    f"{provenance.get('source_sha256', '?')[:12]} ≠ {current[:12]}): "
                                    "run `make measure-ch10`")
    with np.load(path.with_suffix(".npz")) as data:
        arrays = {k: torch.from_numpy(data[k]) for k in data.files}
    return arrays, provenance


def save(root: Path, arrays: dict[str, Tensor], provenance: dict) -> None:
    import numpy as np
    path = root / DATA
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path.with_suffix(".npz"), **{k: v.numpy() for k, v in arrays.items()})
    path.with_suffix(".json").write_text(json.dumps(provenance, indent=1, sort_keys=True) + "\n")
