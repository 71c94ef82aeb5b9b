"""LayerNorm, the position-wise feed-forward network, the post-LN encoder layer, positional encodings."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from attnref import _validate as check
from attnref.multihead import MultiHeadWeights, multi_head_attention

Tensor = torch.Tensor
Activation = Literal["relu", "gelu"]


@dataclass(frozen=True)
class LayerNormParams:
    """Affine part and ε of a LayerNorm. ``gain = bias = None`` is LayerNorm without affine."""

    gain: Tensor | None = None   # (d,)  γ
    bias: Tensor | None = None   # (d,)  β
    eps: float = 1e-5


def layer_norm(x: Tensor, params: LayerNormParams | None = None) -> Tensor:
    r"""LayerNorm over the last axis (Ba et al., 2016), as in ``torch.nn.LayerNorm``:

    .. math:: \mathrm{LN}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \varepsilon}} + \beta,
              \quad \mu = \tfrac1d \textstyle\sum_i x_i,\ \sigma^2 = \tfrac1d \sum_i (x_i - \mu)^2

    (σ² is the biased variance.) Without the affine part (γ = 1, β = 0) the output has mean 0
    and norm :math:`\sqrt{d}\,\sqrt{\sigma^2/(\sigma^2+\varepsilon)}`.
    """
    params = LayerNormParams() if params is None else params
    check.floating("x", x, min_dim=1)
    if params.eps < 0:
        raise ValueError(f"eps must be ≥ 0, got {params.eps}")
    d = x.shape[-1]
    for name in ("gain", "bias"):
        value = getattr(params, name)
        if value is not None:
            check.floating(name, value, exact_dim=1)
            check.same_dtype(x=x, **{name: value})
            if value.shape[0] != d:
                raise ValueError(f"{name} has shape {check.shape_of(value)}, expected ({d},) for x {check.shape_of(x)}")
    # μ and σ are computed so that large offsets, tiny spreads and huge magnitudes lose no accuracy
    # (checked against a 50-digit reference in tests/test_accuracy.py):
    pivot = x[..., :1]                                       # one entry of each row: (..., 1)
    shifted = x - pivot                                      # exact (Sterbenz) where the mean dominates
    centred = shifted - shifted.mean(dim=-1, keepdim=True)   # x − μ = (x − x₁) − mean(x − x₁)
    spread = centred.abs().amax(dim=-1, keepdim=True)        # s = max|x − μ|: (..., 1)
    spread = torch.where(spread > 0, spread, torch.ones_like(spread))   # a constant row: s = 1
    unit = centred / spread                                  # (x − μ)/s, entries in [−1, 1]
    sigma = spread * torch.sqrt((unit * unit).mean(dim=-1, keepdim=True))   # σ (biased), no overflow
    denominator = torch.hypot(sigma, sigma.new_tensor(math.sqrt(params.eps)))   # √(σ² + ε)
    normalised = centred / denominator                       # (x − μ)/√(σ² + ε)
    if params.gain is not None:
        normalised = normalised * params.gain                # γ ⊙ …
    if params.bias is not None:
        normalised = normalised + params.bias                # … + β
    return normalised


def gelu(x: Tensor) -> Tensor:
    r"""Exact GELU, :math:`x\,\Phi(x) = \tfrac{x}{2}\,(1 + \mathrm{erf}(x/\sqrt2))`."""
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def relu(x: Tensor) -> Tensor:
    r""":math:`\max(0, x)`."""
    return torch.clamp(x, min=0)


ACTIVATIONS = {"relu": relu, "gelu": gelu}


@dataclass(frozen=True)
class FeedForward:
    """Position-wise FFN weights in row form: ``w_1 (d, d_ff)``, ``w_2 (d_ff, d)``."""

    w_1: Tensor
    b_1: Tensor | None
    w_2: Tensor
    b_2: Tensor | None
    activation: Activation = "relu"

    def __post_init__(self) -> None:
        check.floating("w_1", self.w_1, exact_dim=2)
        check.floating("w_2", self.w_2, exact_dim=2)
        check.dim_equal("w_1 columns must match w_2 rows (d_ff)", "w_1", self.w_1, 1, "w_2", self.w_2, 0)
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")

    @classmethod
    def from_linears(cls, linear_1: torch.nn.Linear, linear_2: torch.nn.Linear,
                     activation: Activation = "relu") -> "FeedForward":
        """From two ``torch.nn.Linear`` layers, transposing their ``(out, in)`` weights."""
        def bias(linear: torch.nn.Linear) -> Tensor | None:
            return None if linear.bias is None else linear.bias.detach().clone()
        return cls(w_1=linear_1.weight.detach().T.clone(), b_1=bias(linear_1),
                   w_2=linear_2.weight.detach().T.clone(), b_2=bias(linear_2), activation=activation)


def feed_forward(x: Tensor, ffn: FeedForward) -> Tensor:
    r"""Position-wise feed-forward network :math:`\mathrm{FFN}(x) = \phi(x W_1 + b_1) W_2 + b_2`.

    ``φ`` is ReLU (Vaswani et al., 2017) or exact GELU (BERT). ``x (..., n, d)``.
    """
    check.floating("x", x, min_dim=1)
    check.same_dtype(x=x, w_1=ffn.w_1)
    check.dim_equal("x width must match w_1 rows", "x", x, -1, "w_1", ffn.w_1, 0)
    hidden = x @ ffn.w_1                           # (..., n, d) @ (d, d_ff) -> (..., n, d_ff)
    if ffn.b_1 is not None:
        hidden = hidden + ffn.b_1
    hidden = ACTIVATIONS[ffn.activation](hidden)   # φ(x W₁ + b₁)
    output = hidden @ ffn.w_2                      # (..., n, d_ff) @ (d_ff, d) -> (..., n, d)
    if ffn.b_2 is not None:
        output = output + ffn.b_2
    return output


@dataclass(frozen=True)
class EncoderLayer:
    """One post-LN Transformer encoder layer (Vaswani et al., 2017)."""

    attention: MultiHeadWeights
    norm_1: LayerNormParams
    ffn: FeedForward
    norm_2: LayerNormParams

    @classmethod
    def from_torch(cls, layer: torch.nn.TransformerEncoderLayer) -> "EncoderLayer":
        """Read a ``torch.nn.TransformerEncoderLayer(norm_first=False)`` with ReLU or GELU."""
        if layer.norm_first:
            raise ValueError("EncoderLayer is post-LN; got a TransformerEncoderLayer with norm_first=True")
        activation = layer.activation
        if activation is torch.nn.functional.relu or isinstance(activation, torch.nn.ReLU):
            name: Activation = "relu"
        elif activation is torch.nn.functional.gelu or isinstance(activation, torch.nn.GELU):
            if isinstance(activation, torch.nn.GELU) and activation.approximate != "none":
                raise ValueError("only the exact GELU is supported (approximate='none')")
            name = "gelu"
        else:
            raise ValueError(f"unsupported activation {activation!r}: use 'relu' or 'gelu'")

        def norm(ln: torch.nn.LayerNorm) -> LayerNormParams:
            gain = None if ln.weight is None else ln.weight.detach().clone()
            bias = None if ln.bias is None else ln.bias.detach().clone()
            return LayerNormParams(gain=gain, bias=bias, eps=ln.eps)

        return cls(attention=MultiHeadWeights.from_torch(layer.self_attn), norm_1=norm(layer.norm1),
                   ffn=FeedForward.from_linears(layer.linear1, layer.linear2, name), norm_2=norm(layer.norm2))


def encoder_layer_with_weights(x: Tensor, layer: EncoderLayer, mask: Tensor | None = None,
                               key_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    r"""Post-LN encoder layer: :math:`y = \mathrm{LN}_1(x + \mathrm{MHA}(x))`, :math:`z = \mathrm{LN}_2(y + \mathrm{FFN}(y))`.

    ``x (..., n, d)``; ``mask`` and ``key_mask`` as in :func:`attnref.multi_head_attention`.
    Returns ``z (..., n, d)`` and the attention weights of every head ``(..., h, n, n)``.
    """
    attended = multi_head_attention(x, layer.attention, mask=mask, key_mask=key_mask)
    y = layer_norm(x + attended.output, layer.norm_1)            # residual sum, then LayerNorm
    z = layer_norm(y + feed_forward(y, layer.ffn), layer.norm_2)
    return z, attended.weights


def encoder_layer(x: Tensor, layer: EncoderLayer, mask: Tensor | None = None,
                  key_mask: Tensor | None = None) -> Tensor:
    """The output ``z`` of :func:`encoder_layer_with_weights`."""
    return encoder_layer_with_weights(x, layer, mask=mask, key_mask=key_mask)[0]


def sinusoidal_positional_encoding(n: int, d: int, dtype: torch.dtype = torch.float64) -> Tensor:
    r"""Sinusoidal positional encoding (Vaswani et al., 2017, §3.5), ``(n, d)``:

    .. math:: PE_{p, 2i} = \sin(p / 10000^{2i/d}), \qquad PE_{p, 2i+1} = \cos(p / 10000^{2i/d})
    """
    check.positive_int("n", n)
    check.positive_int("d", d)
    if d % 2:
        raise ValueError(f"d must be even for sinusoidal encodings, got d = {d}")
    positions = torch.arange(n, dtype=dtype)[:, None]                       # (n, 1)
    frequencies = 10000.0 ** (-torch.arange(0, d, 2, dtype=dtype) / d)       # (d/2,)
    angles = positions * frequencies                                         # (n, 1) * (d/2,) -> (n, d/2)
    encoding = torch.empty(n, d, dtype=dtype)
    encoding[:, 0::2] = torch.sin(angles)
    encoding[:, 1::2] = torch.cos(angles)
    return encoding
