"""The claims registry: every claim ID of the book, and the verdicts the notebooks compute.

A notebook never types a verdict. It computes whether the claim held in its checks and
calls :func:`record`, which turns that into one of the three verdicts, shows it as the bold
takeaway of the section, and tags the output with machine-readable metadata
(``attnref_verdict``) from which the claims index of the book is generated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

HOLDS = "holds"
CONDITIONS = "holds under conditions"
FAILS = "does not hold"
VERDICTS = (HOLDS, CONDITIONS, FAILS)

#: The kinds of evidence a section can cite.
EVIDENCE = ("symbolic", "numerical", "torch parity", "real model")

#: Metadata key of a verdict output in an executed notebook.
METADATA_KEY = "attnref_verdict"


@dataclass(frozen=True)
class Chapter:
    number: int
    slug: str
    title: str
    notebook: str   # path of the notebook, relative to the repository root, without suffix


@dataclass(frozen=True)
class Claim:
    id: str
    slug: str
    chapter: int
    statement: str   # the claim as people make it, in the book's words
    expected: str    # the verdict the catalogue expects; the notebook's computation decides

    @property
    def label(self) -> str:
        """The claim's label for cross-references (``{prf:ref}`` and ``{ref}`` targets)."""
        return self.id.lower()


CHAPTERS = {
    1: Chapter(1, "nonlinearity", "Where the nonlinearity lives", "notebooks/01-nonlinearity"),
    2: Chapter(2, "linear-layers", "Linear layers in a row?", "notebooks/02-linear-layers"),
    3: Chapter(3, "attention-vs-linear", "Attention versus a linear layer", "notebooks/03-attention-vs-linear"),
    4: Chapter(4, "cosine-vs-dot", "Cosine versus dot product, and why √d_k", "notebooks/04-cosine-vs-dot"),
    5: Chapter(5, "multi-head", "Multi-head attention and the low-rank fused W", "notebooks/05-multi-head"),
    6: Chapter(6, "trained-model", "The claims on a trained Transformer", "notebooks/06-trained-model"),
}

_C = Claim
CLAIMS: dict[str, Claim] = {c.id: c for c in [
    # 1 · Where the nonlinearity lives
    _C("Q1", "quadratic-scores", 1, "The self-attention scores Q Kᵀ = X W_Q W_Kᵀ Xᵀ are a homogeneous quadratic function of the input X.", HOLDS),
    _C("Q2", "self-vs-cross", 1, "Self-attention projects one X into Q and K (not Q = K = X); cross-attention scores are bilinear, linear in each input separately.", HOLDS),
    _C("Q3", "softmax-nonlinear", 1, "Softmax is nonlinear (neither additive nor homogeneous) yet shift invariant; its Jacobian is diag(p) − p pᵀ of rank n − 1.", HOLDS),
    _C("Q4", "output-nonlinear", 1, "The attention output is nonlinear in X; even without softmax it is a homogeneous cubic.", HOLDS),
    _C("Q5", "ffn", 1, "The position-wise FFN is the explicit activation after attention, and it is piecewise linear.", HOLDS),
    _C("Q6", "additive-attention", 1, "In additive attention the tanh is essential: linearised, the query term cancels in the softmax.", HOLDS),
    _C("Q7", "gat-static", 1, "GAT's LeakyReLU keeps the query term from cancelling, but every node ranks its neighbours the same way (static attention).", HOLDS),
    # 2 · Linear layers in a row
    _C("L1", "linear-collapse", 2, "Two linear maps with nothing between them collapse into one matrix of rank at most the smaller inner width.", HOLDS),
    _C("L2", "layernorm-nonlinear", 2, "Between the attention output projection and the FFN there are only linear layers in a row.", FAILS),
    _C("L3", "post-ln-block", 2, "A post-LN block is y = LN(x + MHA(x)), z = LN(y + FFN(y)), as in torch's TransformerEncoderLayer.", HOLDS),
    _C("L4", "random-cosine", 2, "Independent random vectors in d dimensions are nearly orthogonal: E[cos²] = 1/d.", HOLDS),
    _C("L5", "parameter-free", 2, "Self-attention has no parameters.", CONDITIONS),
    _C("L6", "no-zero-weights", 2, "Attention weights of dissimilar tokens become zero or negative.", FAILS),
    # 3 · Attention versus a linear layer
    _C("M1", "input-dependent-weights", 3, "Attention and a linear layer both output weighted sums, but attention's weights depend on the input.", HOLDS),
    _C("M2", "position-wise", 3, "A linear layer applied to every token is a kernel-size-1 convolution; a window over tokens is a wider one.", HOLDS),
    _C("M3", "any-length", 3, "The same attention parameters process sequences of any length; a linear layer over the flattened sequence cannot.", HOLDS),
    _C("M4", "permutation-equivariance", 3, "Without positional information self-attention is permutation equivariant.", HOLDS),
    _C("M5", "resolution-of-identity", 3, "Pairwise orthogonal word vectors satisfy Σᵢ |φᵢ⟩⟨φᵢ| = I.", CONDITIONS),
    _C("M6", "braket-attention", 3, "In bra-ket (softmax-free) attention a token unrelated to the others is mapped to itself.", FAILS),
    _C("M7", "convex-hull", 3, "Softmax attention outputs lie in the convex hull of the value vectors.", HOLDS),
    # 4 · Cosine versus dot product
    _C("C1", "cosine-scale-invariance", 4, "Cosine similarity ignores the scale of its arguments: cos(αa, βb) = sign(αβ) cos(a, b).", HOLDS),
    _C("C2", "cosine-vs-dot-factor", 4, "Cosine attention is dot-product attention with each score divided by the key norm only.", CONDITIONS),
    _C("C3", "variance-dk", 4, "For q, k with independent zero-mean unit-variance components, q·k has mean 0 and variance d_k.", CONDITIONS),
    _C("C4", "scaling-saturation", 4, "Without the 1/√d_k factor softmax saturates as d_k grows and its gradient vanishes.", HOLDS),
    _C("C5", "cosine-bounded", 4, "Cosine attention cannot be sharp: with n keys its largest weight is at most e²/(e² + n − 1).", HOLDS),
    _C("C6", "layernorm-norm", 4, "After LayerNorm all vectors have the same norm, so dot product and cosine agree up to a factor.", CONDITIONS),
    _C("C7", "magnitude-relevance", 4, "A dot-product score can encode a per-key prior through the key's norm; cosine cannot.", HOLDS),
    _C("C8", "other-scalings", 4, "1/√d_k is the right logit scaling for any queries and keys.", CONDITIONS),
    # 5 · Multi-head attention and the fused W
    _C("H1", "fused-bilinear", 5, "Per head, (Q W_i^Q)(K W_i^K)ᵀ = Q W_i Kᵀ with one fused matrix W_i = W_i^Q W_i^Kᵀ.", HOLDS),
    _C("H2", "low-rank", 5, "The fused matrix W_i has rank at most d_k (exactly d_k generically).", HOLDS),
    _C("H3", "parameter-count", 5, "The factored form stores 2·d·d_k parameters per head instead of d².", HOLDS),
    _C("H4", "flop-count", 5, "Computing the scores through the fused d × d matrix would be cheaper than through the factors.", FAILS),
    _C("H5", "fused-projections", 5, "Per-head projections and one packed d × d projection reshaped into heads compute the same thing.", HOLDS),
    _C("H6", "gauge-freedom", 5, "The factors of W_i are determined only up to an invertible d_k × d_k matrix.", HOLDS),
    _C("H7", "low-rank-bottleneck", 5, "One head's n × n logit matrix has rank at most d_k, so some patterns are out of reach when d_k < n.", HOLDS),
]}


@dataclass
class Verdict:
    """A computed verdict; displays itself as the bold takeaway of a section."""

    claim: Claim
    verdict: str
    summary: str
    evidence: tuple[str, ...]
    conditions: str | None = None
    explanation: str | None = None
    real_model: bool = False
    metadata: dict = field(default_factory=dict)

    def markdown(self) -> str:
        kind = "Real model" if self.real_model else "Verdict"
        text = f"**{kind} ({self.claim.id}): {self.verdict}.**"
        if self.conditions:
            text += f" *Conditions:* {self.conditions}."
        text += f" {self.summary}"
        if self.explanation:
            text += f" *Why this differs from the catalogue:* {self.explanation}"
        return text

    def _repr_mimebundle_(self, include=None, exclude=None):
        plain = f"{self.claim.id}: {self.verdict}"
        bundle = {"text/markdown": self.markdown(), "text/plain": plain}
        return bundle, {METADATA_KEY: self.metadata}


_recorded: dict[str, Verdict] = {}


def claim(claim_id: str) -> Claim:
    """The registry entry of ``claim_id`` (``ValueError`` for an unknown ID)."""
    if claim_id not in CLAIMS:
        raise ValueError(f"unknown claim ID {claim_id!r}; known IDs: {', '.join(CLAIMS)}")
    return CLAIMS[claim_id]


def _evidence(evidence: Iterable[str]) -> tuple[str, ...]:
    evidence = tuple(evidence)
    unknown = [e for e in evidence if e not in EVIDENCE]
    if unknown or not evidence:
        raise ValueError(f"evidence must be a non-empty subset of {EVIDENCE}, got {evidence}")
    return evidence


def decide(holds: bool, conditions: str | None = None) -> str:
    """``holds`` and the named conditions it needs → one of :data:`VERDICTS`."""
    if not isinstance(holds, bool):
        # numpy/torch booleans (scalars or one-element arrays) are computed booleans too
        dtype = str(getattr(holds, "dtype", ""))
        numel = holds.numel() if callable(getattr(holds, "numel", None)) else getattr(holds, "size", None)
        if "bool" not in dtype or numel != 1:
            raise ValueError(f"holds must be a computed boolean, got {type(holds).__name__}")
        holds = bool(holds)
    if not holds:
        return FAILS
    return CONDITIONS if conditions else HOLDS


def record(claim_id: str, holds: bool, summary: str, evidence: Iterable[str],
           conditions: str | None = None, explanation: str | None = None) -> Verdict:
    """Record the verdict a section computed and return it for display.

    Args:
        claim_id: an ID of :data:`CLAIMS`.
        holds: the computed outcome of the section's checks for the claim as stated.
        summary: one sentence on what the checks showed (numbers formatted from variables).
        evidence: which of :data:`EVIDENCE` back it.
        conditions: the conditions under which it holds, if any (→ "holds under conditions").
        explanation: required when the computed verdict differs from the catalogue's.
    """
    entry = claim(claim_id)
    verdict = decide(holds, conditions)
    if verdict != entry.expected and not explanation:
        raise ValueError(f"{claim_id}: computed verdict {verdict!r} differs from the catalogue's "
                         f"{entry.expected!r}; say why in `explanation`")
    result = Verdict(entry, verdict, summary, _evidence(evidence), conditions, explanation)
    result.metadata = {"id": claim_id, "verdict": verdict, "evidence": list(result.evidence),
                       "conditions": conditions, "chapter": entry.chapter, "real_model": False}
    _recorded[claim_id] = result
    return result


def recheck(claim_id: str, survives: bool, summary: str, conditions: str | None = None) -> Verdict:
    """Record what a claim does on a trained model (chapter 6): it survives training or not."""
    entry = claim(claim_id)
    verdict = decide(survives, conditions)
    result = Verdict(entry, verdict, summary, ("real model",), conditions, real_model=True)
    result.metadata = {"id": claim_id, "verdict": verdict, "evidence": ["real model"],
                       "conditions": conditions, "chapter": 6, "real_model": True}
    return result


def recorded() -> dict[str, Verdict]:
    """The verdicts recorded in this Python session (by ID)."""
    return dict(_recorded)
