r"""Chapter 10b (claims P1–P3): the residual stream has no privileged basis.

A pre-norm Transformer whose stream meets only linear maps and RMSNorm computes the same function
after any orthogonal change ``Q`` of the stream's basis, once every weight that touches the stream
is compensated (the computational invariance of SliceGPT, Ashkboos et al. 2024):

* the embedding ``E → E Q`` (every stream vector becomes ``x Q``);
* every read-in (``W_Q``, ``W_K``, ``W_V``, the FFN's first layers, the unembedding), after the
  RMSNorm gain ``g`` before it is folded into it: ``W → Qᵀ diag(g) W`` (the norm keeps no gain);
* every write-out (``W_O``, the FFN's last layer; in Gemma 3 the post-norm's gain, which is the last
  linear map of the branch): ``W → W Q``.

It works because ``RMSNorm(x Q) = RMSNorm(x) Q`` (``‖x Q‖ = ‖x‖``), while an elementwise gain does
not commute with ``Q`` (hence the folding). LayerNorm's centring commutes with ``Q`` only when
``Q`` maps the all-ones direction to itself; an elementwise activation on the stream (chapter 7's
``ReLU(x + F(x))``, claim D3) commutes with permutations, not with rotations.

The functions here build the rotated models of SmolLM2 (:mod:`attnref.models.smollm`) and Gemma 3
(:mod:`attnref.models.gemma3`), run them with the book's own blocks, and compare; ``bug=`` plants
one of the mistakes the chapter's checks must catch (:data:`BUGS`). ``tools/measure_ch10b.py``
stores the real models' numbers; the notebook and ``attnref audit`` read them.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from attnref.decoder import DecoderLayerWeights, decoder_block, rms_norm

Tensor = torch.Tensor

#: Unit round-off of float64 and float32 (half a unit in the last place).
U64 = 2.0 ** -53
U32 = 2.0 ** -24
#: The margin of :func:`roundoff_bound` over the first-order prediction (nominal, see there).
MARGIN = 16
#: The planted mistakes: the gains left in the norms instead of folded into the read-ins; only the
#: read-ins (and the embedding) rotated, the write-outs not; the unembedding not rotated back.
BUGS = ("unfolded gains", "read-ins only", "unembedding unrotated")


# --- changes of basis ----------------------------------------------------------------------------

def random_orthogonal(d: int, generator: torch.Generator, dtype: torch.dtype = torch.float64) -> Tensor:
    """A Haar-distributed orthogonal ``(d, d)`` matrix: QR of a Gaussian matrix, columns' signs fixed
    by the diagonal of R (Mezzadri 2007)."""
    if not isinstance(d, int) or d < 1:
        raise ValueError(f"d must be a positive int, got {d!r}")
    a = torch.randn(d, d, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(a)
    return (q * torch.sign(torch.diagonal(r))).to(dtype)


def orthogonal_fixing_ones(d: int, generator: torch.Generator, dtype: torch.dtype = torch.float64) -> Tensor:
    """A random orthogonal ``Q`` with ``𝟙 Q = 𝟙`` (it rotates only the complement of the all-ones
    direction): ``H diag(1, R) H`` with ``H`` the Householder reflection that swaps ``e₁`` and
    ``𝟙/√d`` and ``R`` Haar on ``d − 1`` dimensions."""
    if not isinstance(d, int) or d < 2:
        raise ValueError(f"d must be an int ≥ 2, got {d!r}")
    u = torch.full((d,), d ** -0.5, dtype=torch.float64)
    v = torch.zeros(d, dtype=torch.float64)
    v[0] = 1.0
    v = v - u
    H = torch.eye(d, dtype=torch.float64) - 2 * torch.outer(v, v) / (v @ v)
    inner = torch.eye(d, dtype=torch.float64)
    inner[1:, 1:] = random_orthogonal(d - 1, generator)
    return (H @ inner @ H).to(dtype)


def random_permutation(d: int, generator: torch.Generator, dtype: torch.dtype = torch.float64) -> Tensor:
    """A random permutation matrix ``(d, d)`` (orthogonal, entries 0 and 1)."""
    return torch.eye(d, dtype=dtype)[torch.randperm(d, generator=generator)]


def relative_error(a: Tensor, b: Tensor) -> float:
    """``max |a − b| / max |b|`` in float64 (NaN if either holds a NaN: it never passes a check)."""
    if a.shape != b.shape:
        raise ValueError(f"a and b must have one shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    a, b = a.double(), b.double()
    if torch.isnan(a).any() or torch.isnan(b).any():
        return math.nan
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-300))


def roundoff_bound(float32_error: float, margin: float = MARGIN) -> float:
    r"""The round-off bound for the float64 comparison, from the float32 one.

    Both runs evaluate the same real function (the rotated model equals the original in exact
    arithmetic), so their difference is round-off. To first order in the unit round-off ``u`` the
    difference of two floating-point evaluations of one function is ``c·u`` with ``c`` fixed by the
    model, the input and the order of operations, not by the precision (the standard model
    ``fl(a ∘ b) = (a ∘ b)(1 + δ)``, ``|δ| ≤ u``, linearised). The float32 comparison measures
    ``c ≈ e₃₂ / u₃₂``, so the float64 one is ``e₆₄ ≈ e₃₂ · u₆₄ / u₃₂``; the bound allows
    :data:`MARGIN` times that for the second-order terms and the scatter of ``c`` between two sets
    of roundings (a nominal margin, not a guarantee). A planted bug makes both errors of order 1,
    and then ``e₆₄ ≫ e₃₂ · 2⁻²⁹ · 16``. A float32 error below one unit of round-off counts as one unit
    (an exact float32 agreement would otherwise make the bound 0)."""
    return margin * first_order(float32_error)


def first_order(float32_error: float) -> float:
    """The first-order prediction of the float64 error from the float32 one: ``max(e₃₂, u₃₂) · u₆₄ / u₃₂``
    (NaN stays NaN)."""
    e = float(float32_error)
    return e * U64 / U32 if math.isnan(e) or e >= U32 else U64


def roundoff_ratio(float64_error: float, float32_error: float) -> float:
    """``e₆₄`` over its first-order prediction :func:`first_order` (at most :data:`MARGIN` for
    round-off; of order 2²⁹ ≈ 5·10⁸ when a bug makes both errors of order 1)."""
    return float(float64_error) / first_order(float32_error)


# --- SmolLM2 (Llama layout: pre-norm, RMSNorm, tied embedding) ------------------------------------

@dataclass
class RotatedDecoder:
    """A SmolLM2-layout decoder in another basis of its stream: its blocks (norms without gains, the
    gains folded into the read-ins), the rotated embedding ``(vocab, d)`` and the untied unembedding
    ``(d, vocab)``; ``final_gain`` is the final norm's gain (ones when folded)."""

    config: object
    embedding: Tensor
    layers: list
    final_gain: Tensor
    unembedding: Tensor


def fold_and_rotate_block(layer: DecoderLayerWeights, Q: Tensor, bug: str | None = None) -> DecoderLayerWeights:
    """One SmolLM2 block in the basis ``x Q``: read-ins ``Qᵀ diag(g) W``, write-outs ``W Q``, norms
    without gains. ``bug``: one of :data:`BUGS` (planted, for the checks)."""
    fold = bug != "unfolded gains"
    rotate_out = bug != "read-ins only"
    ones = torch.ones_like(layer.attention_norm)

    def read(gain: Tensor, w: Tensor) -> Tensor:
        return Q.T @ (gain[:, None] * w) if fold else Q.T @ w

    def write(w: Tensor) -> Tensor:
        return w @ Q if rotate_out else w

    return DecoderLayerWeights(
        attention_norm=ones if fold else layer.attention_norm,
        w_q=read(layer.attention_norm, layer.w_q), w_k=read(layer.attention_norm, layer.w_k),
        w_v=read(layer.attention_norm, layer.w_v), w_o=write(layer.w_o),
        ffn_norm=ones if fold else layer.ffn_norm,
        w_gate=read(layer.ffn_norm, layer.w_gate), w_up=read(layer.ffn_norm, layer.w_up),
        w_down=write(layer.w_down))


def rotate_smollm(model, Q: Tensor, bug: str | None = None) -> RotatedDecoder:
    """The :class:`attnref.models.smollm.SmolLM` ``model`` in the basis ``x Q`` (``Q`` orthogonal,
    ``(d, d)``, the model's dtype)."""
    _check_q(Q, model.config.d, model.embedding.dtype)
    if bug is not None and bug not in BUGS:
        raise ValueError(f"bug must be one of {BUGS} or None, got {bug!r}")
    layers = [fold_and_rotate_block(layer, Q, bug) for layer in model.layers]
    fold = bug != "unfolded gains"
    g = model.final_norm
    unembedding = (Q.T @ (g[:, None] * model.embedding.T) if fold else Q.T @ model.embedding.T)
    if bug == "unembedding unrotated":
        unembedding = g[:, None] * model.embedding.T
    return RotatedDecoder(model.config, model.embedding @ Q, layers,
                          torch.ones_like(g) if fold else g, unembedding)


def smollm_logits(model, input_ids: Tensor) -> tuple[Tensor, list[Tensor]]:
    """The original model's logits ``(n, vocab)`` and stream ``[H⁰ … H^L]`` (attnref.models.smollm)."""
    from attnref.models import smollm
    out = smollm.forward(model, input_ids)
    return out.logits, out.hidden


def rotated_smollm_logits(rotated: RotatedDecoder, input_ids: Tensor) -> tuple[Tensor, list[Tensor]]:
    """The rotated model's logits and stream, with the book's decoder blocks."""
    x = rotated.embedding[input_ids]
    hidden = [x]
    for layer in rotated.layers:
        x = decoder_block(x, weights=layer, config=rotated.config, causal=True).output
        hidden.append(x)
    return rms_norm(x, rotated.final_gain, rotated.config.eps) @ rotated.unembedding, hidden


# --- Gemma 3 (sandwich norms: the post-norms' gains are the branches' write-outs) ----------------

@dataclass
class RotatedGemma:
    """Gemma 3 in the basis ``x Q``: per block the folded, rotated read-ins, the unchanged head
    weights (``w_o`` maps the heads into the branch, which is normalised before the stream sees it),
    and the branch write-outs ``diag(1 + w_post) Q`` as dense ``(d, d)`` matrices."""

    config: object
    embedding: Tensor            # (vocab, d): E Q
    layers: list                 # Gemma3LayerWeights with folded read-ins (norm w = 0 where folded)
    attention_out: list          # per block (d, d): diag(1 + w_post-att) Q
    ffn_out: list                # per block (d, d): diag(1 + w_post-ffn) Q
    final_w: Tensor              # the final norm's w (0 when folded)
    unembedding: Tensor          # (d, vocab)


def rotate_gemma(model, Q: Tensor, bug: str | None = None) -> RotatedGemma:
    """The :class:`attnref.models.gemma3.Gemma3` ``model`` in the basis ``x Q``."""
    _check_q(Q, model.config.d, model.embedding.dtype)
    if bug is not None and bug not in BUGS:
        raise ValueError(f"bug must be one of {BUGS} or None, got {bug!r}")
    fold = bug != "unfolded gains"
    rotate_out = bug != "read-ins only"
    layers, att_out, ffn_out = [], [], []
    for layer in model.layers:
        zero = torch.zeros_like(layer.attention_norm)

        def read(w_norm: Tensor, w: Tensor) -> Tensor:
            return Q.T @ ((1.0 + w_norm)[:, None] * w) if fold else Q.T @ w

        layers.append(replace(
            layer, attention_norm=zero if fold else layer.attention_norm,
            w_q=read(layer.attention_norm, layer.w_q), w_k=read(layer.attention_norm, layer.w_k),
            w_v=read(layer.attention_norm, layer.w_v),
            ffn_norm=zero if fold else layer.ffn_norm,
            w_gate=read(layer.ffn_norm, layer.w_gate), w_up=read(layer.ffn_norm, layer.w_up)))
        post = lambda w: torch.diag(1.0 + w) @ Q if rotate_out else torch.diag(1.0 + w)   # noqa: E731
        att_out.append(post(layer.post_attention_norm))
        ffn_out.append(post(layer.post_ffn_norm))
    w_f = model.final_norm
    unembedding = Q.T @ ((1.0 + w_f)[:, None] * model.embedding.T) if fold else Q.T @ model.embedding.T
    if bug == "unembedding unrotated":
        unembedding = (1.0 + w_f)[:, None] * model.embedding.T
    return RotatedGemma(model.config, model.embedding @ Q, layers, att_out, ffn_out,
                        torch.zeros_like(w_f) if fold else w_f, unembedding)


def gemma_logits(model, input_ids: Tensor) -> tuple[Tensor, list[Tensor]]:
    """The original Gemma 3's logits and stream (attnref.models.gemma3)."""
    from attnref.models import gemma3
    out = gemma3.forward(model, input_ids)
    return out.logits, out.hidden


def rotated_gemma_logits(rotated: RotatedGemma, input_ids: Tensor) -> tuple[Tensor, list[Tensor]]:
    """The rotated Gemma's logits and stream: gemma3's attention and GeGLU, each branch normalised
    without a gain and written out by its dense matrix."""
    from attnref.models import gemma3
    c = rotated.config
    factor = torch.tensor(math.sqrt(c.d), dtype=torch.float32).to(rotated.embedding.dtype)
    x = rotated.embedding[input_ids] * factor
    hidden = [x]
    for index, layer in enumerate(rotated.layers):
        att = gemma3.attention(gemma3.gemma_rms_norm(x, layer.attention_norm, c.eps), weights=layer, config=c,
                               layer=index)
        y = x + rms_norm(att.output, None, c.eps) @ rotated.attention_out[index]
        ffn = gemma3.geglu(gemma3.gemma_rms_norm(y, layer.ffn_norm, c.eps), layer.w_gate, layer.w_up, layer.w_down)
        x = y + rms_norm(ffn, None, c.eps) @ rotated.ffn_out[index]
        hidden.append(x)
    return gemma3.gemma_rms_norm(x, rotated.final_w, c.eps) @ rotated.unembedding, hidden


def _check_q(Q: Tensor, d: int, dtype: torch.dtype) -> None:
    if not isinstance(Q, torch.Tensor) or tuple(Q.shape) != (d, d):
        raise ValueError(f"Q must be a ({d}, {d}) tensor for a stream of width d = {d}, got "
                         f"{tuple(getattr(Q, 'shape', ())) or type(Q).__name__}")
    if Q.dtype != dtype:
        raise ValueError(f"Q must have the model's dtype {dtype}, got {Q.dtype}")
    error = float((Q.T.double() @ Q.double() - torch.eye(d, dtype=torch.float64)).abs().max())
    if not error <= 1e-4:
        raise ValueError(f"Q must be orthogonal: max |QᵀQ − I| = {error:.2e}")


# --- the stored measurements (tools/measure_ch10b.py) --------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
DATA = Path("data") / "ch10b-measurements.json"
#: The code that produced the stored numbers (its hash is stored beside them).
SOURCES = ("attnref/analysis/basis.py", "tools/measure_ch10b.py")
#: The models measured: registry name → key.
MODELS = {"SmolLM2-135M-Instruct": "smollm2", "Gemma-3-270M": "gemma3"}


class StaleMeasurements(RuntimeError):
    pass


def source_hash(root: Path = ROOT) -> str:
    """SHA-256 of :data:`SOURCES`."""
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update(name.encode())
        digest.update((root / name).read_bytes())
    return digest.hexdigest()


def load(root: Path | None = None, sources: Path = ROOT) -> dict:
    """The stored measurements (JSON); a missing file, or one measured with other code, raises one
    line naming ``make measure-ch10b``."""
    candidates = [root] if root is not None else [ROOT, Path.cwd(), Path.cwd().parent]
    for candidate in candidates:
        path = Path(candidate) / DATA
        if path.exists():
            break
    else:
        raise StaleMeasurements(f"{DATA} is missing: run `make measure-ch10b` (a few minutes)")
    record = json.loads(path.read_text())
    if (sources / SOURCES[1]).exists():
        current = source_hash(sources)
        if record.get("source_sha256") != current:
            raise StaleMeasurements(f"{DATA} was measured with other code (source hash "
                                    f"{record.get('source_sha256', '?')[:12]} ≠ {current[:12]}): run `make measure-ch10b`")
    return record


# --- small models for the derivation's experiments (the chapter's and the tests' own) ------------

def random_smollm(generator: torch.Generator, d: int = 16, h: int = 4, h_kv: int = 2, d_ff: int = 32,
                  layers: int = 2, vocab: int = 40, dtype: torch.dtype = torch.float64):
    """A seeded SmolLM2-layout decoder (attnref.models.smollm.SmolLM: pre-norm, RMSNorm, SwiGLU,
    rotary grouped-query attention, tied embedding) with gains away from 1 (so that folding them
    matters): weights N(0, 1/fan-in), gains uniform in [0.5, 1.5]."""
    from attnref.decoder import DecoderConfig
    from attnref.models.smollm import SmolLM
    config = DecoderConfig(d=d, h=h, h_kv=h_kv, d_k=d // h, rope_base=10_000.0, eps=1e-6)
    r = lambda *s, fan: torch.randn(*s, generator=generator, dtype=torch.float64) * fan ** -0.5   # noqa: E731
    gain = lambda: 0.5 + torch.rand(d, generator=generator, dtype=torch.float64)                 # noqa: E731
    kv = h_kv * (d // h)
    blocks = [DecoderLayerWeights(attention_norm=gain(), w_q=r(d, d, fan=d), w_k=r(d, kv, fan=d),
                                  w_v=r(d, kv, fan=d), w_o=r(d, d, fan=d), ffn_norm=gain(),
                                  w_gate=r(d, d_ff, fan=d), w_up=r(d, d_ff, fan=d), w_down=r(d_ff, d, fan=d_ff))
              for _ in range(layers)]
    return SmolLM(config, r(vocab, d, fan=1), blocks, gain()).to(dtype)


def rotate_stack(stack, Q: Tensor):
    """Chapter 7's :class:`attnref.analysis.depth.Stack` (LayerNorms without affine part) in the basis
    ``x Q``: every read-in ``Qᵀ W`` (the heads' W_Q, W_K, W_V, the FFN's W_1), every write-out
    ``W Q`` (W^O, its bias, the FFN's W_2 and bias). ``Q`` is ``(d, d)``, or ``(B, d, d)``: one change
    of basis per draw of the stack (e.g. one angle per draw)."""
    from attnref.analysis.depth import Stack
    d = stack.layers[0].attention.w_o.shape[-1]
    if Q.dim() == 3:
        if Q.shape[0] != stack.draws:
            raise ValueError(f"Q of shape {tuple(Q.shape)}: one (d, d) matrix per draw needs {stack.draws} of them")
        for q in Q:
            _check_q(q, d, stack.layers[0].attention.w_o.dtype)
    else:
        _check_q(Q, d, stack.layers[0].attention.w_o.dtype)
    Qt = Q.transpose(-1, -2)
    per_head = Qt.unsqueeze(-3)                       # (…, 1, d, d): the same Qᵀ for every head
    layers = []
    for layer in stack.layers:
        att, ffn = layer.attention, layer.ffn
        att = replace(att, w_q=per_head @ att.w_q, w_k=per_head @ att.w_k, w_v=per_head @ att.w_v, w_o=att.w_o @ Q,
                      b_o=None if att.b_o is None else (att.b_o.unsqueeze(-2) @ Q).squeeze(-2))
        ffn = replace(ffn, w_1=Qt @ ffn.w_1, w_2=ffn.w_2 @ Q,
                      b_2=None if ffn.b_2 is None else (ffn.b_2.unsqueeze(-2) @ Q).squeeze(-2))
        layers.append(replace(layer, attention=att, ffn=ffn))
    return Stack(tuple(layers))


def repeat_draw(stack, draws: int):
    """A one-draw :class:`attnref.analysis.depth.Stack` repeated ``draws`` times (the same weights in every
    draw: one run then serves several changes of basis, one per draw)."""
    from dataclasses import fields as _fields

    from attnref.analysis.depth import Stack
    if stack.draws != 1:
        raise ValueError(f"stack must have one draw to repeat, got {stack.draws}")

    def expand(part):
        return replace(part, **{f.name: getattr(part, f.name).expand(draws, *getattr(part, f.name).shape[1:])
                                for f in _fields(part) if isinstance(getattr(part, f.name), torch.Tensor)})
    return Stack(tuple(replace(layer, attention=expand(layer.attention), ffn=expand(layer.ffn)) for layer in stack.layers))


def stack_errors(stack, x: Tensor, Q: Tensor, variant: str) -> Tensor:
    """Per draw, the relative error between the rotated stack on ``x Q`` and the original's output
    times ``Q`` (``x`` (B, n, d); ``Q`` (d, d) or one per draw (B, d, d)); NaN stays NaN."""
    from attnref.analysis import depth
    original = depth.run(x, stack, variant)[-1] @ Q                   # (B, n, d)
    rotated = depth.run(x @ Q, rotate_stack(stack, Q), variant)[-1]
    scale = original.abs().flatten(1).amax(-1).clamp_min(1e-300)
    return (rotated - original).abs().flatten(1).amax(-1) / scale


def stack_error(stack, x: Tensor, Q: Tensor, variant: str) -> float:
    """Relative error between the rotated stack on ``x Q`` and the original's output times ``Q``, over
    all draws (``variant``: one of attnref.blocks.VARIANTS, e.g. chapter 7's "pre-LN, ReLU after the sums")."""
    from attnref.analysis import depth
    original = depth.run(x, stack, variant)[-1]
    rotated = depth.run(x @ Q, rotate_stack(stack, Q), variant)[-1]
    return relative_error(rotated, original @ Q)


def decoder_error(model, ids: Tensor, Q: Tensor, bug: str | None = None) -> float:
    """Relative logit error of a SmolLM2-layout ``model`` and its rotation by ``Q`` on ``ids``."""
    logits, _ = smollm_logits(model, ids)
    rotated, _ = rotated_smollm_logits(rotate_smollm(model, Q, bug=bug), ids)
    return relative_error(rotated, logits)


def plane_rotation(p1: Tensor, p2: Tensor, theta: float) -> Tensor:
    """The rotation by ``theta`` in the plane of the orthonormal ``p1``, ``p2`` (identity elsewhere)."""
    d = p1.shape[0]
    c, s = math.cos(theta), math.sin(theta)
    return (torch.eye(d, dtype=p1.dtype) + (c - 1) * (torch.outer(p1, p1) + torch.outer(p2, p2))
            + s * (torch.outer(p1, p2) - torch.outer(p2, p1)))
