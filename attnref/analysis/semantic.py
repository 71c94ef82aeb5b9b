r"""A3 · semantic cosine: do tokens of sentences that mean the same thing have higher cosines than
tokens of unrelated sentences, once the direction every token shares is taken out?

The relation is fixed in advance, not read off a model: :data:`PARAPHRASES` holds pairs of
sentences written for this book, each pair saying one thing in two wordings (few content words in
common), every pair about a different topic. For pair ``k`` with sentences ``a_k`` and ``b_k``
and a representation stage (embeddings, or the output of a layer), :func:`pair_cosines` gives
``S[k, k']``: the mean cosine between the tokens of ``a_k`` and the tokens of ``b_{k'}`` over
the token pairs whose word pieces *differ* (a word shared by both wordings is left out, so the
gap is not the trivial cosine of a token with itself in another context). The per-pair gap
(:func:`semantic_gaps`)

.. math:: g_k = S[k, k] - \frac{1}{K - 1} \sum_{k' \ne k} S[k, k']

compares the paraphrase with the other pairs' second sentences, which share its length range and
style but not its meaning.

A2 shows that trained token vectors share common directions that lift every cosine; a gap could
survive or vanish when they are removed. The baseline (:func:`common_directions`,
:func:`remove_common`) is "all-but-the-top" (Mu & Viswanath 2018): subtract the mean token vector
and project out the top ``D`` principal directions, ``D = ⌈d/100⌉`` as they recommend, both
computed per stage from *another* text set (``attnref.analysis.texts.SENTENCES``), so the
baseline is not fitted on the pairs it is applied to (Ethayarajh 2019 corrects for anisotropy
with the same idea, the mean cosine of random pairs).

Everything here is written for any model: a stage is a ``(tokens, d)`` tensor, and the caller
says which tokens count (special tokens and, in a decoder, the first token — the attention sink
of A1 — are left out by the callers).
"""

from __future__ import annotations

import math

import torch

Tensor = torch.Tensor

#: Pairs of sentences with one meaning in two wordings, written for the book (fixed; a pair's
#: index is its identity). Each pair is on its own topic; shared content words are few.
PARAPHRASES: tuple[tuple[str, str], ...] = (
    ("The doctor told him to rest for a week.", "His physician ordered seven days of bed rest."),
    ("It rained heavily all night.", "A downpour lasted until morning."),
    ("The shop closes at six.", "The store shuts its doors at 6 p.m."),
    ("She bought a new car yesterday.", "Yesterday she purchased a brand-new automobile."),
    ("The children were laughing in the garden.", "Kids giggled outside among the flowers."),
    ("Prices went up sharply last year.", "Last year the cost of goods rose steeply."),
    ("He could not find his keys anywhere.", "His keys were nowhere to be found."),
    ("The film was extremely boring.", "That movie was dreadfully dull."),
    ("Please speak more quietly.", "Kindly lower your voice."),
    ("The river flooded the village.", "Water from the stream swamped the small town."),
    ("My phone battery is almost empty.", "My mobile is nearly out of charge."),
    ("The team won the championship.", "The squad took the title."),
    ("The soup is too salty.", "There is far too much salt in this broth."),
    ("They moved to a bigger house.", "The family relocated to a larger home."),
    ("The plane landed safely.", "The aircraft touched down without incident."),
    ("I am very tired after work.", "The job leaves me exhausted every evening."),
    ("The teacher praised the student.", "The pupil was complimented by her instructor."),
    ("Fresh vegetables are good for your health.", "Eating garden produce keeps the body well."),
    ("The bridge was closed for repairs.", "Workers shut the crossing to fix it."),
    ("He lost his job in the spring.", "In April he was dismissed from his position."),
    ("The meeting was postponed.", "The gathering was put off until later."),
    ("The dog barked at the stranger.", "The hound growled at the unfamiliar man."),
    ("The computer crashed again.", "My laptop froze once more."),
    ("She is a talented singer.", "Her voice is remarkably gifted."),
    ("The road was covered in ice.", "A frozen layer coated the street."),
    ("We need to save money.", "Our spending must be reduced."),
    ("The museum opens on Sunday.", "The gallery admits visitors at the weekend."),
    ("He quickly ran to the station.", "He hurried to catch the train."),
    ("The patient recovered fully.", "The sick woman regained her health completely."),
    ("The lecture was hard to understand.", "The talk was difficult to follow."),
    ("The baby fell asleep quickly.", "The infant dozed off within minutes."),
    ("The company hired ten new workers.", "The firm employed a dozen fresh staff members."),
)


def directions_count(d: int) -> int:
    """``D = ⌈d/100⌉`` principal directions removed (Mu & Viswanath 2018): 4 for d = 384, 6 for d = 576."""
    if d < 1:
        raise ValueError(f"d must be a positive width, got {d}")
    return math.ceil(d / 100)


def common_directions(total: Tensor, outer: Tensor, count: int | Tensor, components: int) -> tuple[Tensor, Tensor]:
    r"""The mean vector and the top ``components`` principal directions of a set of vectors, from
    their sums: ``total`` ``(…, d)`` = Σ x, ``outer`` ``(…, d, d)`` = Σ x xᵀ over ``count`` vectors.
    Returns ``(mean (…, d), directions (…, components, d))``, the directions orthonormal, of the
    covariance Σ x xᵀ / N − μ μᵀ, largest eigenvalue first."""
    total, outer = total.double(), outer.double()
    if total.shape[-1] != outer.shape[-1] or outer.shape[-2] != outer.shape[-1] or outer.shape[:-1] != total.shape:
        raise ValueError(f"total (…, d) and outer (…, d, d) must match, got {tuple(total.shape)} and {tuple(outer.shape)}")
    if not 0 <= components <= total.shape[-1]:
        raise ValueError(f"components must be in [0, d = {total.shape[-1]}], got {components}")
    n = torch.as_tensor(count, dtype=torch.float64)
    mean = total / n
    covariance = outer / n - mean[..., :, None] * mean[..., None, :]
    _, vectors = torch.linalg.eigh(covariance)                      # ascending eigenvalues
    directions = vectors[..., :, -components:].flip(-1).transpose(-2, -1) if components else \
        torch.zeros(*total.shape[:-1], 0, total.shape[-1], dtype=torch.float64)
    return mean, directions


def remove_common(x: Tensor, mean: Tensor, directions: Tensor) -> Tensor:
    """``x − mean`` with its components along ``directions`` ``(D, d)`` (orthonormal) removed: the
    "all-but-the-top" post-processing. ``x`` ``(n, d)``."""
    if x.shape[-1] != mean.shape[-1] or directions.shape[-1] != mean.shape[-1]:
        raise ValueError(f"x (n, d), mean (d,) and directions (D, d) must share d, got {tuple(x.shape)}, "
                         f"{tuple(mean.shape)}, {tuple(directions.shape)}")
    centred = x.double() - mean.double()
    return centred - (centred @ directions.double().T) @ directions.double()


def pair_cosines(first: list[Tensor], first_ids: list[Tensor], second: list[Tensor],
                 second_ids: list[Tensor]) -> Tensor:
    """``S[k, k']``: the mean cosine between the vectors of ``first[k]`` ``(n_k, d)`` and those of
    ``second[k']`` ``(m_k', d)`` over the token pairs whose ids (``first_ids[k]``, ``second_ids[k']``)
    differ. ``(K, K')`` float64; NaN where no pair of different tokens exists."""
    if len(first) != len(first_ids) or len(second) != len(second_ids):
        raise ValueError("every list of vectors needs its list of token ids of the same length")
    units_a = [torch.nn.functional.normalize(x.double(), dim=-1) for x in first]
    units_b = [torch.nn.functional.normalize(x.double(), dim=-1) for x in second]
    out = torch.full((len(first), len(second)), math.nan, dtype=torch.float64)
    for k, (a, ids_a) in enumerate(zip(units_a, first_ids)):
        if a.shape[0] != ids_a.shape[0]:
            raise ValueError(f"first[{k}] has {a.shape[0]} vectors but {ids_a.shape[0]} token ids")
        for j, (b, ids_b) in enumerate(zip(units_b, second_ids)):
            keep = ids_a[:, None] != ids_b[None, :]                  # (n, m): different word pieces
            if keep.any():
                out[k, j] = (a @ b.T)[keep].mean()
    return out


def semantic_gaps(cosines: Tensor) -> Tensor:
    r"""Per pair, ``g_k = S[k, k] − mean_{k' ≠ k} S[k, k']`` from ``S`` ``(K, K, …)`` (more stages
    along the trailing axes): ``(K, …)``."""
    K = cosines.shape[0]
    if cosines.dim() < 2 or cosines.shape[1] != K or K < 2:
        raise ValueError(f"cosines must be (K, K, …) with K ≥ 2, got {tuple(cosines.shape)}")
    diagonal = torch.eye(K, dtype=torch.bool)
    own = cosines[diagonal]                                          # (K, …)
    others = (cosines.sum(1) - own) / (K - 1)
    return own - others


#: The condition named when only one of the two cosines orders the pairs (see :func:`record`).
RAW = "raw cosines"
REMOVED = "the common direction removed (all-but-the-top)"


def record(evidence, intervals: dict, stages: str) -> None:
    r"""A3's rule, fixed before any model was measured, applied to the bootstrap intervals of the
    mean gap (over pairs) of the raw cosines (``intervals["raw"]``) and of the cosines with the
    common direction removed (``intervals["removed"]``), each averaged over ``stages`` (text):

    * both intervals lie above 0 → the claim as stated is checked twice and *holds*;
    * an interval lies below 0 (paraphrases have *lower* cosines) → that cosine is a
      counterexample; the other, if above 0, is recorded under its condition (*holds under
      conditions*), else as a second counterexample or undecided (*does not hold* or *not
      established*);
    * anything else (an interval holds 0) → recorded as stated, and fails: *not established*, the
      measurement does not decide.
    """
    below = {key: interval.high < 0 for key, interval in intervals.items()}
    names = {"raw": f"raw cosines: mean gap (paraphrase − unrelated), {stages}",
             "removed": f"common direction removed: mean gap (paraphrase − unrelated), {stages}"}
    fails_if = {"raw": "semantic closeness does not raise the raw cosine (paraphrase and unrelated pairs alike)",
                "removed": "the raw gap is only the shared direction (it vanishes once that is removed)"}
    if not any(below.values()):
        for key in ("raw", "removed"):
            evidence.beyond(names[key], 0.0, intervals[key], side="below", fails_if=fails_if[key])
        return
    for key in ("raw", "removed"):
        if below[key]:
            evidence.counterexample.beyond(names[key], 0.0, intervals[key], side="above",
                                           fails_if="the paraphrases' cosines are not lower than the unrelated ones")
        else:
            evidence.under(RAW if key == "raw" else REMOVED).beyond(
                names[key], 0.0, intervals[key], side="below", fails_if=fails_if[key])
