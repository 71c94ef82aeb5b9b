"""The claims registry: the book's chapters, its claims (the catalogue's wording and expected
verdict), the trained models the claims are rechecked on, and the expected verdict of each recheck.

Data only — the verdict engine (evidence, checks, the rule that decides) is
:mod:`attnref.book.claims`, which re-exports every name defined here, so ``claims.CLAIMS``,
``claims.claim("Q1")`` and ``claims.HOLDS`` keep working. To add or reword a claim, edit the
``_C(...)`` rows below (chapter 8's are E1, E2, …); the catalogue is ``CLAIMS.md``.

Standard library only: the book build and the portable comparison load it by path, without torch.
"""

from __future__ import annotations

from dataclasses import dataclass

# The verdicts (the names the rule in :mod:`attnref.book.claims` returns).
HOLDS = "holds"
CONDITIONS = "holds under conditions"
FAILS = "does not hold"
#: A recheck on a trained model whose premise is measured not to hold there (C3's independent
#: unit-variance components, C6's equal norms): the claim is not tested, the premise is refuted.
PREMISE_FAILS = "premise fails here"
NOT_ESTABLISHED = "not established"
#: The verdicts the evidence can settle on. A claim's expected verdict is one of ALL_VERDICTS:
#: NOT_ESTABLISHED is expected only where a planned measurement cannot decide (E5: an interval
#: that contains the smallest effect that counts; E2: a baseline at chance at depth 8, which the
#: plan's supporting check refuses; E4: its robustness grid, which the plan's amendment 2 requires,
#: was not run in the session's time) — an honest result the book states as one.
VERDICTS = (HOLDS, CONDITIONS, FAILS, PREMISE_FAILS)
ALL_VERDICTS = (*VERDICTS, NOT_ESTABLISHED)


@dataclass(frozen=True)
class Chapter:
    number: int
    slug: str
    title: str           # MyST inline markdown (math allowed)
    notebook: str        # path of the notebook, relative to the repository root, without suffix


@dataclass(frozen=True)
class Claim:
    id: str
    slug: str
    chapter: int
    statement: str   # the claim as people make it, in the book's words
    expected: str    # the verdict the catalogue expects; the notebook's evidence decides
    #: the notebook that records the claim when it is not its chapter's first page (chapter 6's
    #: Gemma 3 claims live in 06c), without suffix; None: the chapter's notebook
    notebook: str | None = None

    @property
    def page(self) -> str:
        """The notebook (without suffix) whose section records this claim's verdict."""
        return self.notebook or CHAPTERS[self.chapter].notebook

    @property
    def label(self) -> str:
        """The claim's label for cross-references (``{prf:ref}`` and ``{ref}`` targets)."""
        return self.id.lower()


CHAPTERS = {
    1: Chapter(1, "nonlinearity", "Where the nonlinearity lives", "notebooks/01-nonlinearity"),
    2: Chapter(2, "linear-layers", "Linear layers in a row?", "notebooks/02-linear-layers"),
    3: Chapter(3, "attention-vs-linear", "Attention versus a linear layer", "notebooks/03-attention-vs-linear"),
    4: Chapter(4, "cosine-vs-dot", "Cosine versus dot product, and why $\\sqrt{d_k}$", "notebooks/04-cosine-vs-dot"),
    5: Chapter(5, "multi-head", "Multi-head attention and the low-rank fused W", "notebooks/05-multi-head"),
    6: Chapter(6, "trained-model", "The claims on trained Transformers", "notebooks/06-trained-model"),
    7: Chapter(7, "depth", "Depth: what keeps a stack of attention layers alive", "notebooks/07-depth"),
    8: Chapter(8, "training", "Does it matter in training?", "notebooks/08-training"),
    9: Chapter(9, "online-softmax", "Attention without the $n \\times m$ matrix", "notebooks/09-online-softmax"),
    10: Chapter(10, "ffn-memory", "The FFN as a memory, and weights below zero", "notebooks/10-ffn-memory"),
}

_C = Claim
CLAIMS: dict[str, Claim] = {c.id: c for c in [
    # 1 · Where the nonlinearity lives
    _C("Q1", "quadratic-scores", 1, r"With projections without biases, the self-attention scores $QK^\top = X W_{QK} X^\top$ ($W_{QK} = W_Q W_K^\top$) are a homogeneous quadratic function of the input $X$ (generically: with a non-zero, non-antisymmetric $W_{QK}$); biases add linear and constant terms.", HOLDS),
    _C("Q2", "self-vs-cross", 1, r"Self-attention projects one $X$ into $Q$ and $K$ (not $Q = K = X$), so its scores are generically not symmetric; cross-attention scores are bilinear, linear in each input separately.", HOLDS),
    _C("Q3", "softmax-nonlinear", 1, r"Softmax is nonlinear (neither additive nor homogeneous) yet shift invariant; its Jacobian is $\operatorname{diag}(p) - pp^\top$ of rank $n - 1$.", HOLDS),
    _C("Q4", "output-nonlinear", 1, r"The attention output is nonlinear in $X$; even without softmax it is a homogeneous cubic (with projections without biases; biases add terms of lower degree).", HOLDS),
    _C("Q5", "ffn", 1, "The position-wise FFN is the explicit activation after attention; with ReLU it is piecewise linear, with GELU smooth.", HOLDS),
    _C("Q6", "additive-attention", 1, "In additive attention the query's term cancels in the softmax to first order, so the tanh is what makes the weights depend on the query.", CONDITIONS),
    _C("Q7", "gat-static", 1, "GAT's LeakyReLU keeps the query term from cancelling, but every node ranks its neighbours the same way (static attention).", HOLDS),
    _C("Q8", "softmax-alternatives", 1, r"Softmax can be replaced by an elementwise sigmoid (or tanh, ReLU) of the scores, as some models do.", CONDITIONS),
    # 2 · Linear layers in a row
    _C("L1", "linear-collapse", 2, r"Two linear maps with nothing between them collapse into one matrix of rank at most the smaller inner width — in every attention layer, $W_V^i W_O^i$ is such a pair.", HOLDS),
    _C("L2", "layernorm-nonlinear", 2, "Between the attention output projection and the FFN there are only linear layers in a row.", FAILS),
    _C("L3", "post-ln-block", 2, r"A post-LN block is $y = \mathrm{LN}(x + \mathrm{MHA}(x))$, $z = \mathrm{LN}(y + \mathrm{FFN}(y))$, as in torch's TransformerEncoderLayer.", HOLDS),
    _C("L4", "random-cosine", 2, r"Independent random vectors in $d$ dimensions are nearly orthogonal: $\mathrm{E}[\cos^2] = 1/d$.", HOLDS),
    _C("L5", "parameter-free", 2, "Self-attention — the attention layer of the Transformer the thread explains — has no parameters. (The basic form without projections has none: a different statement, checked beside the evidence.)", FAILS),
    _C("L6", "no-zero-weights", 2, "In exact arithmetic, the attention weights of dissimilar tokens become zero or negative. (In floating point a weight underflows to exactly 0 beyond a finite logit gap.)", FAILS),
    # 3 · Attention versus a linear layer
    _C("M1", "input-dependent-weights", 3, "Attention and a linear layer both output weighted sums, but attention's weights depend on the input.", HOLDS),
    _C("M2", "position-wise", 3, "A linear layer applied to every token is a kernel-size-1 convolution; a window over tokens is a wider one.", HOLDS),
    _C("M3", "any-length", 3, "The same attention parameters process sequences of any length; a linear layer over the flattened sequence cannot.", HOLDS),
    _C("M4", "permutation-equivariance", 3, "Without positional information self-attention is permutation equivariant.", CONDITIONS),
    _C("M5", "resolution-of-identity", 3, r"Pairwise orthogonal word vectors satisfy $\sum_i |\varphi_i\rangle\langle\varphi_i| = I$.", CONDITIONS),
    _C("M6", "braket-attention", 3, "In bra-ket (softmax-free) attention a token unrelated to the others is mapped to itself.", FAILS),
    _C("M7", "convex-hull", 3, "Softmax attention outputs lie in the convex hull of the value vectors.", HOLDS),
    # 4 · Cosine versus dot product
    _C("C1", "cosine-scale-invariance", 4, r"Cosine similarity ignores the scale of its arguments: $\cos(\alpha a, \beta b) = \operatorname{sign}(\alpha\beta)\cos(a, b)$.", HOLDS),
    _C("C2", "cosine-vs-dot-factor", 4, "Cosine attention is dot-product attention with each score divided by the key norm only.", CONDITIONS),
    _C("C3", "variance-dk", 4, r"For $q$, $k$ with independent zero-mean unit-variance components, $q \cdot k$ has mean 0 and variance $d_k$.", HOLDS),
    _C("C4", "scaling-saturation", 4, r"Without the $1/\sqrt{d_k}$ factor softmax saturates as $d_k$ grows: its entropy falls and its typical (median) Jacobian norm vanishes.", HOLDS),
    _C("C5", "cosine-bounded", 4, r"Cosine attention cannot be sharp: with $n$ keys its largest weight is at most $e^2/(e^2 + n - 1)$.", HOLDS),
    _C("C6", "layernorm-norm", 4, "After LayerNorm all vectors have the same norm, so dot product and cosine agree up to a factor.", CONDITIONS),
    _C("C7", "magnitude-relevance", 4, r"A dot-product score can encode an additive per-key prior $b_j$ (through a constant feature, $[q, 1]\cdot[k_j, b_j]$); cosine attention with an unbiased query cannot.", HOLDS),
    _C("C8", "other-scalings", 4, r"$1/\sqrt{d_k}$ is the right logit scaling: it keeps the logits of order one as $d_k$ grows.", CONDITIONS),
    _C("C9", "unselectable-keys", 4, "With dot-product scores a key strictly inside the convex hull of the other keys never receives the largest weight, for any query; with cosine scores every key of distinct direction can.", HOLDS),
    _C("C10", "scalings-in-practice", 4, r"The logit scalings used in practice keep the softmax out of saturation differently: T5 folds $1/\sqrt{d_k}$ into the initialisation (the same function family), Gemma 2 soft-caps logits with $c\tanh(s/c)$, μP divides by $d_k$.", HOLDS),
    # 5 · Multi-head attention and the fused W
    _C("H1", "fused-bilinear", 5, r"Per head, $(QW_i^Q)(KW_i^K)^\top = Q W_i K^\top$ with one fused matrix $W_i = W_i^Q W_i^{K\top}$.", HOLDS),
    _C("H2", "low-rank", 5, r"The fused matrix $W_i$ has rank at most $d_k$ (exactly $d_k$ generically).", HOLDS),
    _C("H3", "parameter-count", 5, r"The factored form stores $2 d d_k$ parameters per head instead of $d^2$.", HOLDS),
    _C("H4", "flop-count", 5, r"Computing the scores through the fused $d \times d$ matrix would be cheaper than through the factors.", FAILS),
    _C("H5", "fused-projections", 5, r"Per-head projections and one packed $d \times d$ projection reshaped into heads compute the same thing.", HOLDS),
    _C("H6", "gauge-freedom", 5, r"The factors of $W_i$ are determined only up to an invertible $d_k \times d_k$ matrix.", HOLDS),
    _C("H7", "low-rank-bottleneck", 5, r"One head's $n \times n$ logit matrix has rank at most $d_k$ and its row-centred log-weights rank at most $\min(d_k, n - 1)$, so some attention patterns are out of reach when $d_k < n - 1$.", HOLDS),
    _C("H8", "rope-no-single-w", 5, r"With rotary positions there is no single fused $W$ per head: the scores use $W_Q R_{j-i} W_K^\top$, depend on positions only through $j - i$, and the gauge freedom shrinks to matrices commuting with the rotations.", HOLDS),
    # 6 · The claims on trained Transformers
    _C("A1", "attention-sinks", 6, "Trained Transformers park much of their attention mass on a few content-free tokens (attention sinks): since softmax weights cannot be zero, a head with nothing to attend to attends to a sink, whose small value vector makes that mass a near no-op.", HOLDS),
    _C("A2", "anisotropy", 6, r"L4's isotropic premise fails for trained representations: token vectors share common directions, so tokens of different sentences have a mean cosine well above 0 and $\mathrm{E}[\cos^2]$ far above $1/d$.", HOLDS),
    _C("A3", "semantic-cosine", 6, "Semantically closer tokens have a higher cosine: tokens of two sentences with one meaning are closer than tokens of unrelated sentences, also once the common direction every token shares (A2) is removed.", HOLDS),
    # 6c · QK-norm in a trained model (Gemma 3 270M): claims G1–G4 (notebooks/06c-qk-norm-model)
    _C("G1", "qk-norm-selectability", 6, r"With RMSNorm on the keys after their projection (QK-norm) every key lies on the surface of one ellipsoid, so no key is unselectable among the keys before the rotary positions: C9's remedy, in a real model (Gemma 3).", CONDITIONS, "notebooks/06c-qk-norm-model"),
    _C("G2", "fused-view-under-norm", 6, r"With RMSNorm (gains $g_q$, $g_k$) between projection and product a score is $x_q W_Q \operatorname{diag}(g_q \circ g_k) W_K^\top x_k^\top$ (with rotary positions, $W_Q D_q R_t D_k W_K^\top$) divided by the two projected RMS norms: a fused matrix of rank at most $d_k$ still carries the pattern, the per-token norms carry the scale.", HOLDS, "notebooks/06c-qk-norm-model"),
    _C("G3", "bounded-logits", 6, r"QK-norm bounds every logit by a number fixed by the gains and the query scale, whatever the input; dot-product logits have no such bound.", HOLDS, "notebooks/06c-qk-norm-model"),
    _C("G4", "sliding-window-reach", 6, r"Five of every six Gemma 3 blocks attend only within 512 tokens (a sliding window); the sixth sees the whole prefix.", HOLDS, "notebooks/06c-qk-norm-model"),
    # 7 · Depth
    _C("D1", "rank-collapse", 7, "A stack of self-attention layers drives the tokens to one shared vector (rank collapse), doubly exponentially in depth, with or without skip connections.", CONDITIONS),
    _C("D2", "pre-ln-identity-path", 7, r"The pre-LN block $x + F(\mathrm{LN}(x))$ is the pre-activation ResNet: at initialisation its last layer's gradient shrinks like $1/\sqrt{L}$ with depth $L$ (post-LN's does not depend on $L$ and is larger), and post-LN's per-layer gradients grow toward the output while pre-LN's do not.", HOLDS),
    _C("D3", "relu-after-residual", 7, r"An activation after the residual sum, $\mathrm{ReLU}(x + F(x))$, removes the identity path: the input–output Jacobian loses directions with depth ($x + F(x)$ keeps full rank), and the tokens drift together faster.", HOLDS),
    # 8 · Training experiments
    # chapter 8's verdicts come from the runs of the committed plan (data/experiments/plan.toml);
    # E5 is undecided by that plan's ten seeds: "not established" is its honest, expected result;
    # E2 is not established by the plan's rule: at depth 8 post-LN stays at chance in 200 steps (its
    # supporting off-chance check fails), though both ReLU placements are far worse at depths 2 and 4
    _C("E1", "activation-after-projections", 8, r"A nonlinearity $\sigma$ after the $Q$, $K$, $V$ projections (on $q$, $k$ and $v$) makes training better.", FAILS),
    _C("E2", "activation-after-residual", 8, "A ReLU after Add & Norm (or inside the branch), as in ResNets, makes a post-LN Transformer train better.", NOT_ESTABLISHED),
    _C("E3", "attention-vs-mlp", 8, "Attention brings context and keeps its accuracy at longer inputs; a flattened MLP trained to a plateau cannot match it.", FAILS),
    _C("E4", "cosine-vs-dot", 8, "Cosine scores train as well as scaled dot products.", NOT_ESTABLISHED),
    _C("E5", "fused-vs-factored", 8, r"One full $d \times d$ matrix per head trains better than the factors $W_Q$, $W_K$ at equal score parameters.", NOT_ESTABLISHED),
    _C("E6", "logit-growth", 8, "At a high learning rate dot-product attention logits grow and the attention entropy collapses, while QK-norm keeps them bounded.", HOLDS),
    _C("E7", "heads-vs-width", 8, r"$h$ heads of width $d/h$ train better than one head of width $d$ at equal parameters on a task that reads two positions at once.", CONDITIONS),
    # 9 · Attention without the n × m matrix
    _C("F1", "online-softmax", 9, r"Attention can be computed block by block with the online softmax (a running maximum, a running sum and a rescaled accumulator) without ever forming the $n \times m$ matrix: exactly $\mathrm{softmax}(QK^\top/\sqrt{d_k})V$ in real arithmetic, within a derived round-off bound in floating point, in memory $O(n \cdot \text{block})$ instead of $O(nm)$.", HOLDS),
    # 10 · The FFN as attention over learned memories (issue 45)
    _C("K1", "ffn-slot-sum", 10, r"The position-wise FFN is a weighted sum over $d_\text{ff}$ learned slots, $\mathrm{FFN}(x) = \sum_k \phi(x \cdot k_k + b_k)\, v_k + b_2$ (keys the columns of $W_1$, values the rows of $W_2$; gated FFNs alike): attention with weights computed from the input, but keys and values that are parameters.", HOLDS),
    _C("K2", "softmax-memory", 10, r"A softmax-normalised FFN, $\mathrm{softmax}(x W_1 + b_1) W_2$, is attention of each token over $d_\text{ff}$ fixed memories (keys $W_1^\top$, values $W_2$); the usual ReLU/GELU FFN is not: its weights are neither normalised nor bounded.", HOLDS),
    _C("K3", "sparse-slots", 10, r"In trained Transformers (MiniLM, SmolLM2, Gemma 3) the FFN's slot weights are sparse and input-dependent: in the median block a token needs at most half of the slots for 90 % of $\sum_k |a_k|\,\lVert v_k\rVert$, and the top 1 % of slots of tokens of different sentences overlap by at most one half.", FAILS),
    _C("W1", "differential-weights", 10, r"Differential attention $(A_1 - \lambda A_2)V$ has effective weights that can be negative and rows that sum to $1 - \lambda$.", HOLDS),
    _C("W2", "sink-cancels", 10, r"A sink that both maps of a differential head share cancels in $A_1 - \lambda A_2$: on the sink blocks of SmolLM2 and Gemma 3, two heads of one block with one $\lambda$ keep at most a quarter of the sink's weight.", HOLDS),
    _C("W3", "outside-hull", 10, r"A differential head's output can leave the convex hull of its value vectors (M7 needs non-negative weights summing to one).", HOLDS),
    _C("W4", "null-slot", 10, r"A softmax with a null slot, $e^{s_j}/(1 + \sum_l e^{s_l})$, is attention over one extra zero key with a zero value: its weights sum to less than one, and a head can attend to nothing.", HOLDS),
    _C("N1", "batchnorm-batch", 10, "With BatchNorm a token's output depends on the other sequences of its batch and on padding; with LayerNorm or RMSNorm it does not.", HOLDS),
    _C("N2", "batchnorm-modes", 10, "BatchNorm computes a different function in evaluation (running statistics) than in training (the batch's statistics).", HOLDS),
    _C("N3", "batchnorm-future", 10, "Behind causal attention, a norm with statistics over the batch's tokens (BatchNorm) leaks later positions into earlier outputs; LayerNorm and RMSNorm do not.", HOLDS),
    _C("N4", "rmsnorm-centring", 10, r"RMSNorm is LayerNorm without the centring: both map a token to norm $\sqrt d$ and neither is linear (C6's premise and L2 alike), and they differ by $\sqrt{2 - 2\sqrt{1-\rho^2}}$ of the norm, $\rho$ the token's mean over its root mean square.", HOLDS),
    # 10b · No privileged basis, and a gate after attention (issue 45; notebooks/10b-basis-and-gates)
    _C("P1", "no-privileged-basis", 10, r"The residual stream of a pre-norm Transformer that meets only linear maps and RMSNorm has no privileged basis: any orthogonal change of the stream's basis, compensated in every weight (embedding $EQ$, read-ins $Q^\top \operatorname{diag}(g) W$ with the gains folded, write-outs $WQ$, the unembedding), leaves the logits unchanged — SmolLM2 and Gemma 3 included.", HOLDS, "notebooks/10b-basis-and-gates"),
    _C("P2", "layernorm-basis", 10, r"A LayerNorm Transformer has no privileged basis either: any orthogonal change of the stream's basis, compensated in the weights, leaves it unchanged.", CONDITIONS, "notebooks/10b-basis-and-gates"),
    _C("P3", "activation-privileges-axes", 10, r"A stack with an elementwise activation on the stream, $\mathrm{ReLU}(x + F(x))$ (D3), has no privileged basis either.", CONDITIONS, "notebooks/10b-basis-and-gates"),
    _C("S1", "gated-value-path", 10, r"A sigmoid gate between attention and $W^O$ makes a head's value-to-output map depend on the token: for fixed attention weights the head is no longer linear in its input, no longer the one fixed matrix $W_V W^O$ of L1.", HOLDS, "notebooks/10b-basis-and-gates"),
    _C("S2", "gate-adds-rank", 10, r"The gate lifts the head's low-rank bottleneck: a gated head can write to more than $d_v$ directions of the stream.", FAILS, "notebooks/10b-basis-and-gates"),
]}

@dataclass(frozen=True)
class Model:
    name: str
    slug: str          # section targets of its rechecks: (<slug>-<id>)=, e.g. (minilm-c3)=
    short: str         # column heading in the claims index
    description: str
    #: a column of its own in the claims index (chapter 8's text model: its six rechecks are listed in
    #: the index's rechecks table and chapter 8's side-by-side table instead, keeping the index compact)
    column: bool = True


#: The trained models the claims are rechecked on (chapter 6), by name.
MODELS = {m.name: m for m in [
    Model("all-MiniLM-L6-v2", "minilm", "MiniLM encoder",
          "a post-LN encoder, fine-tuned contrastively (sentence-transformers)"),
    Model("SmolLM2-135M-Instruct", "smollm", "SmolLM2 decoder",
          "a pre-norm, causal, rotary decoder with grouped-query attention (4-bit GGUF)"),
    Model("Gemma-3-270M", "gemma", "Gemma 3 decoder",
          "a decoder with QK-norm, sandwich norms, sliding-window attention in 5 of 6 blocks and one key/value head (4-bit GGUF)"),
    Model("Shakespeare-char-LM", "text", "Text (Shakespeare)",
          "chapter 8's character-level decoder (d = 64, 2, 4 or 8 layers, 500 steps, 10 seeds a setting) trained on 34 of "
          "Shakespeare's plays and scored on 4 others: the training experiments on real text", column=False),
]}

#: The verdict each recheck on a trained model is expected to give: {(claim ID, model): verdict}.
#: As for the claims, the evidence decides; a difference fails ``make test`` until this table
#: (and the text) says why.
RECHECKS: dict[tuple[str, str], str] = {
    ("H2", "all-MiniLM-L6-v2"): HOLDS,
    ("C3", "all-MiniLM-L6-v2"): PREMISE_FAILS,
    ("C6", "all-MiniLM-L6-v2"): PREMISE_FAILS,
    ("C2", "all-MiniLM-L6-v2"): CONDITIONS,
    ("L4", "all-MiniLM-L6-v2"): PREMISE_FAILS,
    # C9 on a trained model (attnref.analysis.hull.record_c9, chapters and audit alike): no key of the
    # text lies strictly inside its head's hull, so the premise fails there (C9 costs nothing)
    ("C9", "all-MiniLM-L6-v2"): PREMISE_FAILS,
    ("H2", "SmolLM2-135M-Instruct"): HOLDS,
    ("H8", "SmolLM2-135M-Instruct"): HOLDS,
    ("H7", "SmolLM2-135M-Instruct"): HOLDS,
    ("C3", "SmolLM2-135M-Instruct"): PREMISE_FAILS,
    ("C6", "SmolLM2-135M-Instruct"): PREMISE_FAILS,
    ("D1", "SmolLM2-135M-Instruct"): CONDITIONS,
    ("D2", "SmolLM2-135M-Instruct"): HOLDS,
    ("A1", "SmolLM2-135M-Instruct"): HOLDS,
    ("A2", "SmolLM2-135M-Instruct"): HOLDS,
    ("A3", "SmolLM2-135M-Instruct"): HOLDS,
    ("L4", "SmolLM2-135M-Instruct"): PREMISE_FAILS,
    ("C9", "SmolLM2-135M-Instruct"): PREMISE_FAILS,
    ("C3", "Gemma-3-270M"): PREMISE_FAILS,
    ("A1", "Gemma-3-270M"): HOLDS,
    # chapter 6c reads these from attnref audit's stored report (data/audit/gemma3, make audit-models)
    ("H2", "Gemma-3-270M"): HOLDS,
    ("C6", "Gemma-3-270M"): PREMISE_FAILS,
    ("L4", "Gemma-3-270M"): PREMISE_FAILS,
    ("A2", "Gemma-3-270M"): HOLDS,
    # no key of the audit's 256-token text lies inside its head's hull (d_k = 256): the premise fails
    ("C9", "Gemma-3-270M"): PREMISE_FAILS,
    # the control (the attention-only path without the causal mask) does not accelerate: late/early 1.12 < 1.5
    ("D1", "Gemma-3-270M"): NOT_ESTABLISHED,
    # chapter 8 on text (data/experiments/text/amendment-1.toml): E1 and E7 read differently at half
    # the budget (the amendment's robustness rule), E2's post-LN baseline does not learn at depth 8
    ("E1", "Shakespeare-char-LM"): NOT_ESTABLISHED,
    ("E2", "Shakespeare-char-LM"): NOT_ESTABLISHED,
    ("E4", "Shakespeare-char-LM"): NOT_ESTABLISHED,
    ("E5", "Shakespeare-char-LM"): NOT_ESTABLISHED,
    ("E6", "Shakespeare-char-LM"): HOLDS,
    ("E7", "Shakespeare-char-LM"): NOT_ESTABLISHED,
}


def claim(claim_id: str) -> Claim:
    """The registry entry of ``claim_id`` (``ValueError`` for an unknown ID)."""
    if claim_id not in CLAIMS:
        raise ValueError(f"unknown claim ID {claim_id!r}; known IDs: {', '.join(CLAIMS)}")
    return CLAIMS[claim_id]


def expected_verdict(claim_id: str, model: str | None = None) -> str:
    """The catalogue's expected verdict for a claim, or for its recheck on ``model``."""
    if model is None:
        return claim(claim_id).expected
    if (claim_id, model) not in RECHECKS:
        raise ValueError(f"no expected verdict for the recheck of {claim_id} on {model!r}: add it to RECHECKS")
    return RECHECKS[(claim_id, model)]
