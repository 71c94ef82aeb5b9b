"""LayerNorm, the position-wise feed-forward network, the encoder layer's weights, positional encodings.

The layers themselves (post-LN, pre-LN and their variants) are computed in :mod:`attnref.blocks`,
which imports this module (never the other way round).

Batches of layers: every weights type here (:class:`LayerNormParams`, :class:`FeedForward`,
:class:`EncoderLayer`, and :class:`attnref.MultiHeadWeights`) may carry leading batch axes
``W`` on every tensor — ``B`` independent layers, e.g. chapter 7's random draws — validated
like the rest (all tensors of one part share ``W``; the parts of a layer have batch axes that
broadcast). Batched weights apply draw ``b`` to ``x[..., b, :, :]``: the input's batch axes
broadcast with ``W``. :func:`stack_weights` builds a batch from single layers and
:func:`select` takes one layer out of it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Literal, Mapping, Sequence, TypeVar

import torch

from attnref import _validate as check
from attnref.multihead import MultiHeadWeights

Tensor = torch.Tensor
Activation = Literal["relu", "gelu"]
T = TypeVar("T")


def _batch_of(name: str, t: Tensor | None, trailing: int) -> tuple[int, ...]:
    """The leading batch axes of a weight tensor with ``trailing`` axes of its own (``()`` for None)."""
    return () if t is None else tuple(t.shape[:-trailing])


def _same_batch(what: str, **tensors: tuple[Tensor | None, int]) -> tuple[int, ...]:
    """The one batch shape of the given weight tensors (name: (tensor, own axes)), or a ValueError."""
    shapes = {name: _batch_of(name, t, k) for name, (t, k) in tensors.items() if t is not None}
    if len(set(shapes.values())) > 1:
        listing = ", ".join(f"{name} {check.shape_of(tensors[name][0])}" for name in shapes)
        raise ValueError(f"the tensors of {what} must share one batch shape, got {listing}")
    return next(iter(shapes.values()), ())


def _per_token(t: Tensor, batch: tuple[int, ...]) -> Tensor:
    """A per-layer vector ``(*W, k)`` made to broadcast over the tokens of ``x (..., *W, n, k)``."""
    return t[..., None, :] if batch else t


def _layer_input(name: str, x: Tensor, batch: tuple[int, ...], weights_name: str, like: Tensor) -> None:
    """``x``'s batch axes broadcast with the weights' batch axes ``batch`` (batched weights need tokens)."""
    if not batch:
        return
    if x.dim() < 2 or check.broadcast_shapes(tuple(x.shape[:-2]), batch) is None:
        raise ValueError(f"{name} has shape {check.shape_of(x)}; batched {weights_name} {check.shape_of(like)} "
                         f"need {name} (..., n, d) with batch axes that broadcast with {batch}")


@dataclass(frozen=True)
class LayerNormParams:
    """Affine part and ε of a LayerNorm. ``gain = bias = None`` is LayerNorm without affine.

    ``gain`` and ``bias`` are ``(d,)``, or ``(*W, d)`` for a batch of LayerNorms (one batch shape)."""

    gain: Tensor | None = None   # (*W, d)  γ
    bias: Tensor | None = None   # (*W, d)  β
    eps: float = 1e-5

    def __post_init__(self) -> None:
        check.real_number("eps", self.eps, nonnegative=True)
        for name in ("gain", "bias"):
            if getattr(self, name) is not None:
                check.floating(name, getattr(self, name), min_dim=1)
        if self.gain is not None and self.bias is not None:
            check.same_dtype(gain=self.gain, bias=self.bias)
            if self.gain.shape != self.bias.shape:
                raise ValueError(f"gain and bias must have one shape (*W, d), got gain {check.shape_of(self.gain)} "
                                 f"and bias {check.shape_of(self.bias)}")

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The leading batch axes ``W`` (``()`` for one LayerNorm or without affine part)."""
        return _batch_of("gain", self.gain if self.gain is not None else self.bias, 1)

    @classmethod
    def default(cls, d: int, eps: float = 1e-5, dtype: torch.dtype = torch.float64,
                device: torch.device | str | None = None) -> "LayerNormParams":
        """γ = 1, β = 0 (torch's initialisation), as tensors of width ``d``."""
        check.positive_int("d", d)
        check.floating_dtype("dtype", dtype)
        return cls(gain=torch.ones(d, dtype=dtype, device=device), bias=torch.zeros(d, dtype=dtype, device=device),
                   eps=eps)

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> "LayerNormParams":
        """The same parameters on another device and/or in another floating dtype."""
        def move(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(device=device, dtype=dtype)
        return replace(self, gain=move(self.gain), bias=move(self.bias))


def layer_norm(x: Tensor, params: LayerNormParams | None = None) -> Tensor:
    r"""LayerNorm over the last axis (Ba et al., 2016), as in ``torch.nn.LayerNorm``:

    .. math:: \mathrm{LN}(x) = \gamma \odot \frac{x - \mu}{\sqrt{\sigma^2 + \varepsilon}} + \beta,
              \quad \mu = \tfrac1d \textstyle\sum_i x_i,\ \sigma^2 = \tfrac1d \sum_i (x_i - \mu)^2

    (σ² is the biased variance.) Without the affine part (γ = 1, β = 0) the output has mean 0
    and norm :math:`\sqrt{d}\,\sqrt{\sigma^2/(\sigma^2+\varepsilon)}`.

    A constant row (σ = 0) maps to β, with the finite gradient :math:`\gamma \odot (I - \tfrac1d
    \mathbf 1 \mathbf 1^\top)/\sqrt\varepsilon` (torch's); with ε = 0 it is undefined and raises
    ``ValueError``. A row of width d = 0 raises ``ValueError``.

    Half precision: for float16/bfloat16 inputs μ, σ, the normalisation and the affine part are
    computed in float32 and the result rounded once to the input's dtype (as
    ``torch.nn.LayerNorm`` does); float32 and float64 are computed in their own dtype.
    """
    params = LayerNormParams() if params is None else params
    if not isinstance(params, LayerNormParams):
        raise ValueError(f"params must be LayerNormParams or None, got {type(params).__name__}")
    check.floating("x", x, min_dim=1)
    d = x.shape[-1]
    if d == 0:
        raise ValueError(f"x has shape {check.shape_of(x)}: LayerNorm over d = 0 entries is undefined")
    batch = params.batch_shape
    for name in ("gain", "bias"):
        part = getattr(params, name)
        if part is not None:
            if part.shape[-1] != d:
                raise ValueError(f"{name} has shape {check.shape_of(part)}, expected {tuple(part.shape[:-1]) + (d,)} "
                                 f"for x {check.shape_of(x)}")
            check.same_dtype(x=x, **{name: part})
    _layer_input("x", x, batch, "LayerNorm gain", params.gain if params.gain is not None else params.bias)
    dtype = x.dtype
    x = x.float() if dtype in check.HALF_PRECISION else x    # statistics of half precision in float32
    # μ and σ are computed so that large offsets, tiny spreads and huge magnitudes lose no accuracy
    # (checked against a 50-digit reference in tests/test_accuracy.py):
    pivot = x[..., :1]                                       # one entry of each row: (..., 1)
    shifted = x - pivot                                      # exact (Sterbenz) where the mean dominates
    centred = shifted - shifted.mean(dim=-1, keepdim=True)   # x − μ = (x − x₁) − mean(x − x₁)
    spread = centred.abs().amax(dim=-1, keepdim=True)        # s = max|x − μ|: (..., 1)
    spread = torch.where(spread > 0, spread, torch.ones_like(spread))   # a constant row: s = 1
    unit = centred / spread                                  # (x − μ)/s, entries in [−1, 1]
    mean_square = (unit * unit).mean(dim=-1, keepdim=True)   # σ²/s² ≥ 1/d, or 0 for a constant row
    constant = mean_square == 0                              # (..., 1)
    # σ = s·√(σ²/s²); √ is taken of 1 instead of 0 for a constant row (σ = 0 there): the
    # derivative of √ at 0 is infinite and would turn the (zero) gradient of σ into NaN.
    root = torch.sqrt(torch.where(constant, torch.ones_like(mean_square), mean_square))
    sigma = torch.where(constant, torch.zeros_like(mean_square), spread * root)   # σ (biased), no overflow
    denominator = torch.hypot(sigma, sigma.new_tensor(math.sqrt(params.eps)))     # √(σ² + ε)
    if params.eps == 0 and check.any_true(constant):
        raise ValueError(f"x of shape {check.shape_of(x)} has a constant row: LayerNorm with eps = 0 divides 0 by 0")
    normalised = centred / denominator                       # (x − μ)/√(σ² + ε)
    if params.gain is not None:
        normalised = normalised * _per_token(params.gain, batch)   # γ ⊙ … (float32 for half precision)
    if params.bias is not None:
        normalised = normalised + _per_token(params.bias, batch)   # … + β
    return normalised.to(dtype)


def gelu(x: Tensor) -> Tensor:
    r"""Exact GELU, :math:`x\,\Phi(x) = \tfrac{x}{2}\,(1 + \mathrm{erf}(x/\sqrt2))`."""
    return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))


def relu(x: Tensor) -> Tensor:
    r""":math:`\max(0, x)`."""
    return torch.clamp(x, min=0)


ACTIVATIONS = {"relu": relu, "gelu": gelu}


@dataclass(frozen=True)
class FeedForward:
    """Position-wise FFN weights in row form: ``w_1 (d, d_ff)``, ``b_1 (d_ff,)``, ``w_2 (d_ff, d)``, ``b_2 (d,)``
    — or a batch of FFNs, every tensor with the same leading axes ``W``: ``w_1 (*W, d, d_ff)``, …"""

    w_1: Tensor            # (*W, d, d_ff)
    b_1: Tensor | None     # (*W, d_ff)
    w_2: Tensor            # (*W, d_ff, d)
    b_2: Tensor | None     # (*W, d)
    activation: Activation = "relu"

    def __post_init__(self) -> None:
        check.floating("w_1", self.w_1, min_dim=2)
        check.floating("w_2", self.w_2, min_dim=2)
        for name in ("b_1", "b_2"):
            if getattr(self, name) is not None:
                check.floating(name, getattr(self, name), min_dim=1)
        batch = _same_batch("the FFN", w_1=(self.w_1, 2), w_2=(self.w_2, 2))
        check.dim_equal("w_1 columns must match w_2 rows (d_ff)", "w_1", self.w_1, -1, "w_2", self.w_2, -2)
        check.same_dtype(w_1=self.w_1, w_2=self.w_2)
        for name, like in (("b_1", "w_1"), ("b_2", "w_2")):
            bias, weight = getattr(self, name), getattr(self, like)
            if bias is not None:
                if tuple(bias.shape) != batch + (weight.shape[-1],):
                    raise ValueError(f"{name} has shape {check.shape_of(bias)}, expected {batch + (weight.shape[-1],)} "
                                     f"for {like} {check.shape_of(weight)}")
                check.same_dtype(**{like: weight, name: bias})
        if not isinstance(self.activation, str) or self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The leading batch axes ``W`` (``()`` for one FFN)."""
        return _batch_of("w_1", self.w_1, 2)

    @classmethod
    def from_linears(cls, linear_1: torch.nn.Linear, linear_2: torch.nn.Linear,
                     activation: Activation = "relu") -> "FeedForward":
        """From two ``torch.nn.Linear`` layers, transposing their ``(out, in)`` weights."""
        check.instance("linear_1", linear_1, torch.nn.Linear)
        check.instance("linear_2", linear_2, torch.nn.Linear)
        def bias(linear: torch.nn.Linear) -> Tensor | None:
            return None if linear.bias is None else linear.bias.detach().clone()
        return cls(w_1=linear_1.weight.detach().T.clone(), b_1=bias(linear_1),
                   w_2=linear_2.weight.detach().T.clone(), b_2=bias(linear_2), activation=activation)

    @classmethod
    def random(cls, d: int, d_ff: int, activation: Activation = "relu", bias: bool = True,
               generator: torch.Generator | None = None, dtype: torch.dtype = torch.float64,
               device: torch.device | str | None = None) -> "FeedForward":
        """``w_1`` from N(0, 1/d), ``w_2`` from N(0, 1/d_ff) (variance-preserving), zero biases.

        Draws come from ``generator`` on its device and are placed on ``device``.
        """
        check.positive_int("d", d)
        check.positive_int("d_ff", d_ff)
        check.boolean("bias", bias)
        check.floating_dtype("dtype", dtype)
        source = device if generator is None else generator.device

        def draw(rows: int, columns: int) -> Tensor:
            sample = torch.randn(rows, columns, generator=generator, dtype=dtype, device=source) * rows ** -0.5
            return sample if device is None else sample.to(device)

        w_1, w_2 = draw(d, d_ff), draw(d_ff, d)
        zeros = (lambda k: torch.zeros(k, dtype=dtype, device=w_1.device)) if bias else (lambda k: None)
        return cls(w_1=w_1, b_1=zeros(d_ff), w_2=w_2, b_2=zeros(d), activation=activation)

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> "FeedForward":
        """The same weights on another device and/or in another floating dtype."""
        def move(t: Tensor | None) -> Tensor | None:
            return None if t is None else t.to(device=device, dtype=dtype)
        return replace(self, w_1=move(self.w_1), b_1=move(self.b_1), w_2=move(self.w_2), b_2=move(self.b_2))


def feed_forward(x: Tensor, ffn: FeedForward) -> Tensor:
    r"""Position-wise feed-forward network :math:`\mathrm{FFN}(x) = \phi(x W_1 + b_1) W_2 + b_2`.

    ``φ`` is ReLU (Vaswani et al., 2017) or exact GELU (BERT). ``x (..., n, d)``; batched weights
    ``(*W, …)`` apply draw ``b`` to ``x[..., b, :, :]``.
    """
    check.instance("ffn", ffn, FeedForward)
    check.floating("x", x, min_dim=1)
    check.same_dtype(x=x, w_1=ffn.w_1)
    check.dim_equal("x width must match w_1 rows", "x", x, -1, "w_1", ffn.w_1, -2)
    batch = ffn.batch_shape
    _layer_input("x", x, batch, "ffn.w_1", ffn.w_1)
    hidden = x @ ffn.w_1                           # (..., n, d) @ (*W, d, d_ff) -> (..., n, d_ff)
    if ffn.b_1 is not None:
        hidden = hidden + _per_token(ffn.b_1, batch)
    hidden = ACTIVATIONS[ffn.activation](hidden)   # φ(x W₁ + b₁)
    output = hidden @ ffn.w_2                      # (..., n, d_ff) @ (*W, d_ff, d) -> (..., n, d)
    if ffn.b_2 is not None:
        output = output + _per_token(ffn.b_2, batch)
    return output


def _activation_name(activation: object) -> Activation:
    if activation is torch.nn.functional.relu or isinstance(activation, torch.nn.ReLU):
        return "relu"
    if activation is torch.nn.functional.gelu or isinstance(activation, torch.nn.GELU):
        if isinstance(activation, torch.nn.GELU) and activation.approximate != "none":
            raise ValueError("only the exact GELU is supported (approximate='none')")
        return "gelu"
    raise ValueError(f"unsupported activation {activation!r}: use 'relu' or 'gelu'")


@dataclass(frozen=True)
class EncoderLayer:
    """The weights of one Transformer layer: attention, two LayerNorms, the FFN, and the placement.

    ``norm_first=False`` is the post-LN layer of Vaswani et al. (2017),
    ``LN(x + MHA(x))`` then ``LN(y + FFN(y))``; ``norm_first=True`` the pre-LN layer,
    ``x + MHA(LN(x))`` then ``y + FFN(LN(y))`` (as ``torch.nn.TransformerEncoderLayer``'s flag).
    ``norm_1`` belongs to the attention sublayer and ``norm_2`` to the FFN in both placements.
    The flag is read by :func:`attnref.blocks.encoder_layer`; :func:`attnref.blocks.post_ln_layer`,
    :func:`attnref.blocks.pre_ln_layer` and the other :data:`attnref.blocks.VARIANTS` run one set
    of weights in the placement they name.

    A batch of layers: each part carries the same leading axes ``W`` (see the module docstring)
    or none (an unbatched part, e.g. LayerNorms without affine part, is shared by every layer).
    """

    attention: MultiHeadWeights
    norm_1: LayerNormParams
    ffn: FeedForward
    norm_2: LayerNormParams
    norm_first: bool = False

    def __post_init__(self) -> None:
        for name, kind in (("attention", MultiHeadWeights), ("norm_1", LayerNormParams), ("ffn", FeedForward),
                           ("norm_2", LayerNormParams)):
            if not isinstance(getattr(self, name), kind):
                raise ValueError(f"{name} must be {kind.__name__}, got {type(getattr(self, name)).__name__}")
        check.boolean("norm_first", self.norm_first)
        d = self.attention.w_o.shape[-1]
        if self.attention.d != d:
            raise ValueError(f"the attention maps width {self.attention.d} to {d}: a residual layer needs the same width")
        check.dim_equal("the FFN input width must be the model width d", "attention.w_o", self.attention.w_o, -1,
                        "ffn.w_1", self.ffn.w_1, -2)
        check.dim_equal("the FFN output width must be the model width d", "attention.w_o", self.attention.w_o, -1,
                        "ffn.w_2", self.ffn.w_2, -1)
        for name in ("norm_1", "norm_2"):
            for part in ("gain", "bias"):
                tensor = getattr(getattr(self, name), part)
                if tensor is not None:
                    if tensor.shape[-1] != d:
                        raise ValueError(f"{name}.{part} has shape {check.shape_of(tensor)}, expected width {d} "
                                         f"for attention.w_o {check.shape_of(self.attention.w_o)}")
                    check.same_dtype(**{"attention.w_o": self.attention.w_o, f"{name}.{part}": tensor})
        check.same_dtype(attention=self.attention.w_q, ffn=self.ffn.w_1)
        parts = {"attention": self.attention.batch_shape, "ffn": self.ffn.batch_shape,
                 "norm_1": self.norm_1.batch_shape, "norm_2": self.norm_2.batch_shape}
        if len(set(parts.values()) - {()}) > 1:
            raise ValueError("the layer's parts must share one batch shape W (or have none): "
                             + ", ".join(f"{k} {v}" for k, v in parts.items()))

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The leading batch axes ``W`` of the layer (``()`` for one layer)."""
        return max((self.attention.batch_shape, self.ffn.batch_shape, self.norm_1.batch_shape,
                    self.norm_2.batch_shape), key=len)

    @property
    def d(self) -> int:
        return self.attention.d

    @classmethod
    def from_torch(cls, layer: torch.nn.TransformerEncoderLayer) -> "EncoderLayer":
        """Read a ``torch.nn.TransformerEncoderLayer`` (either ``norm_first``) with ReLU or GELU."""
        check.instance("layer", layer, torch.nn.TransformerEncoderLayer)
        name = _activation_name(layer.activation)

        def norm(ln: torch.nn.LayerNorm) -> LayerNormParams:
            gain = None if ln.weight is None else ln.weight.detach().clone()
            bias = None if ln.bias is None else ln.bias.detach().clone()
            return LayerNormParams(gain=gain, bias=bias, eps=ln.eps)

        return cls(attention=MultiHeadWeights.from_torch(layer.self_attn), norm_1=norm(layer.norm1),
                   ffn=FeedForward.from_linears(layer.linear1, layer.linear2, name), norm_2=norm(layer.norm2),
                   norm_first=bool(layer.norm_first))

    def to_torch(self) -> torch.nn.TransformerEncoderLayer:
        """A ``torch.nn.TransformerEncoderLayer(batch_first=True, dropout=0)`` computing the same function.

        Missing biases and LayerNorm affine parts become zeros and ones (the same function).
        """
        if self.batch_shape:
            raise ValueError(f"to_torch converts one layer; this layer has batch axes {self.batch_shape} "
                             "(take one with attnref.layers.select)")
        a = self.attention
        if self.norm_1.eps != self.norm_2.eps:
            raise ValueError(f"torch uses one layer_norm_eps; got {self.norm_1.eps} and {self.norm_2.eps}")
        layer = torch.nn.TransformerEncoderLayer(a.d, a.h, self.ffn.w_1.shape[1], dropout=0.0,
                                                 activation=self.ffn.activation, layer_norm_eps=self.norm_1.eps,
                                                 batch_first=True, norm_first=self.norm_first, dtype=a.dtype,
                                                 device=a.device)

        def zeros(*shape: int) -> Tensor:
            return torch.zeros(*shape, dtype=a.dtype, device=a.device)

        biased = MultiHeadWeights(w_q=a.w_q, w_k=a.w_k, w_v=a.w_v, w_o=a.w_o,
                                  b_q=zeros(a.h, a.d_k) if a.b_q is None else a.b_q,
                                  b_k=zeros(a.h, a.d_k) if a.b_k is None else a.b_k,
                                  b_v=zeros(a.h, a.d_v) if a.b_v is None else a.b_v,
                                  b_o=zeros(a.d) if a.b_o is None else a.b_o)
        with torch.no_grad():
            layer.self_attn.load_state_dict(biased.to_torch().state_dict())
            layer.linear1.weight.copy_(self.ffn.w_1.T)
            layer.linear1.bias.copy_(zeros(self.ffn.w_1.shape[1]) if self.ffn.b_1 is None else self.ffn.b_1)
            layer.linear2.weight.copy_(self.ffn.w_2.T)
            layer.linear2.bias.copy_(zeros(a.d) if self.ffn.b_2 is None else self.ffn.b_2)
            for params, module in ((self.norm_1, layer.norm1), (self.norm_2, layer.norm2)):
                module.weight.copy_(torch.ones_like(module.weight) if params.gain is None else params.gain)
                module.bias.copy_(torch.zeros_like(module.bias) if params.bias is None else params.bias)
        return layer

    @classmethod
    def random(cls, d: int, h: int, d_ff: int, norm_first: bool = False, activation: Activation = "relu",
               eps: float = 1e-5, generator: torch.Generator | None = None, dtype: torch.dtype = torch.float64,
               device: torch.device | str | None = None) -> "EncoderLayer":
        """A layer at a stated initialisation: attention from :meth:`MultiHeadWeights.random`
        (weights and biases N(0, 1/d)), FFN from :meth:`FeedForward.random` (N(0, 1/d),
        N(0, 1/d_ff), zero biases), LayerNorms γ = 1, β = 0."""
        check.boolean("norm_first", norm_first)
        attention = MultiHeadWeights.random(d, h, generator=generator, dtype=dtype, device=device)
        ffn = FeedForward.random(d, d_ff, activation, generator=generator, dtype=dtype, device=device)
        where = attention.device
        return cls(attention=attention, norm_1=LayerNormParams.default(d, eps, dtype, where), ffn=ffn,
                   norm_2=LayerNormParams.default(d, eps, dtype, where), norm_first=norm_first)

    def to(self, device: torch.device | str | None = None, dtype: torch.dtype | None = None) -> "EncoderLayer":
        """The same layer on another device and/or in another floating dtype."""
        return replace(self, attention=self.attention.to(device, dtype), norm_1=self.norm_1.to(device, dtype),
                       ffn=self.ffn.to(device, dtype), norm_2=self.norm_2.to(device, dtype))


def named_tensors(weights: object, prefix: str = "") -> dict[str, Tensor]:
    """Every tensor of a weights dataclass (nested ones included) by dotted name, e.g.
    ``"attention.w_q"``, ``"norm_1.gain"``; absent biases (``None``) are left out."""
    out: dict[str, Tensor] = {}
    for f in fields(weights):
        value = getattr(weights, f.name)
        if isinstance(value, torch.Tensor):
            out[prefix + f.name] = value
        elif is_dataclass(value):
            out.update(named_tensors(value, f"{prefix}{f.name}."))
    return out


def replace_tensors(weights: T, tensors: Mapping[str, Tensor]) -> T:
    """The same weights dataclass with the tensors named in ``tensors`` (as by :func:`named_tensors`)
    replaced — e.g. by ``torch.nn.Parameter`` s, for training (:mod:`attnref.blocks`)."""
    changes: dict[str, object] = {}
    for f in fields(weights):
        value = getattr(weights, f.name)
        if f.name in tensors:
            changes[f.name] = tensors[f.name]
        elif is_dataclass(value):
            inner = {k[len(f.name) + 1:]: v for k, v in tensors.items() if k.startswith(f.name + ".")}
            if inner:
                changes[f.name] = replace_tensors(value, inner)
    return replace(weights, **changes)


def _settings(weights: object, prefix: str = "") -> dict[str, object]:
    """The fields of a weights dataclass that are not tensors (``eps``, ``activation``, …), by dotted name."""
    out: dict[str, object] = {}
    for f in fields(weights):
        value = getattr(weights, f.name)
        if is_dataclass(value):
            out.update(_settings(value, f"{prefix}{f.name}."))
        elif not isinstance(value, torch.Tensor) and value is not None:
            out[prefix + f.name] = value
    return out


def stack_weights(layers: Sequence[T]) -> T:
    """A batch of weights from single ones of one type and shape: every tensor stacked along a new
    leading axis ``(B, …)`` (``layers`` a list or tuple of :class:`EncoderLayer`,
    :class:`FeedForward`, :class:`LayerNormParams` or :class:`attnref.MultiHeadWeights`; the
    settings — ``eps``, ``activation``, ``norm_first`` — must agree)."""
    if not isinstance(layers, (list, tuple)) or not layers:
        raise ValueError(f"layers must be a non-empty list or tuple of weights, got {type(layers).__name__}"
                         + (" of length 0" if isinstance(layers, (list, tuple)) else ""))
    first = layers[0]
    if not is_dataclass(first) or isinstance(first, type):
        raise ValueError(f"layers[0] must be a weights dataclass, got {type(first).__name__}")
    names = tuple(named_tensors(first))
    for i, layer in enumerate(layers):
        if type(layer) is not type(first):
            raise ValueError(f"layers[{i}] is {type(layer).__name__}, layers[0] {type(first).__name__}")
        if tuple(named_tensors(layer)) != names or _settings(layer) != _settings(first):
            raise ValueError(f"layers[{i}] differs from layers[0] in its settings or absent tensors")
    return replace_tensors(first, {k: torch.stack([named_tensors(layer)[k] for layer in layers]) for k in names})


def select(weights: T, index: int | slice | tuple[int | slice, ...]) -> T:
    """One layer (or a sub-batch) of batched weights: every tensor indexed on its leading batch
    axes, ``t[index]`` (``index`` an int, a slice, or a tuple of them, one per batch axis)."""
    batch = getattr(weights, "batch_shape", None)
    if batch is None:
        raise ValueError(f"weights must be batched weights (a weights dataclass), got {type(weights).__name__}")
    index = index if isinstance(index, tuple) else (index,)
    def fits(i: object, size: int) -> bool:
        return isinstance(i, slice) or (isinstance(i, int) and not isinstance(i, bool) and -size <= i < size)
    if len(index) > len(batch) or not all(fits(i, size) for i, size in zip(index, batch)):
        raise ValueError(f"index must be ints or slices within the batch shape {batch}, got {index!r}")
    own = {"w_q": 3, "w_k": 3, "w_v": 3, "w_o": 2, "b_q": 2, "b_k": 2, "b_v": 2, "b_o": 1,   # each tensor's
           "w_1": 2, "w_2": 2, "b_1": 1, "b_2": 1, "gain": 1, "bias": 1}                    # own axes
    def take(name: str, t: Tensor) -> Tensor:
        return t[index] if t.dim() > own[name.rsplit(".", 1)[-1]] else t     # unbatched parts are shared
    return replace_tensors(weights, {k: take(k, t) for k, t in named_tensors(weights).items()})


def sinusoidal_positional_encoding(n: int, d: int, dtype: torch.dtype = torch.float64,
                                   device: torch.device | str | None = None) -> Tensor:
    r"""Sinusoidal positional encoding (Vaswani et al., 2017, §3.5), ``(n, d)``:

    .. math:: PE_{p, 2i} = \sin(p / 10000^{2i/d}), \qquad PE_{p, 2i+1} = \cos(p / 10000^{2i/d})

    ``dtype`` is floating; float16/bfloat16 tables are computed in float64 and rounded once
    (positions beyond 2048 are not representable in float16).
    """
    check.positive_int("n", n)
    check.positive_int("d", d)
    check.floating_dtype("dtype", dtype)
    if d % 2:
        raise ValueError(f"d must be even for sinusoidal encodings, got d = {d}")
    if dtype in check.HALF_PRECISION:
        return sinusoidal_positional_encoding(n, d, torch.float64, device).to(dtype)
    positions = torch.arange(n, dtype=dtype, device=device)[:, None]                  # (n, 1)
    frequencies = 10000.0 ** (-torch.arange(0, d, 2, dtype=dtype, device=device) / d)  # (d/2,)
    angles = positions * frequencies                                         # (n, 1) * (d/2,) -> (n, d/2)
    encoding = torch.empty(n, d, dtype=dtype, device=device)
    encoding[:, 0::2] = torch.sin(angles)
    encoding[:, 1::2] = torch.cos(angles)
    return encoding
