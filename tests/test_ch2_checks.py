"""Chapter 2 (L1–L6): each claim's recorded checks catch a plausible bug.

Every test runs the notebook's own code cells (found by their first line) in a fresh namespace
with one plausible bug injected into the library code they exercise; the named check must then
fail, and where it bears on the claim as stated or on a condition the verdict moves with it. The
same cells without the bug are the notebook's stored run: there every check of the claim passed
and the verdict is the catalogue's (checked from the stored outputs, not re-run, to stay fast).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

import attnref
from attnref.book import claims

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "02-linear-layers.ipynb"


def _cells() -> list[dict]:
    cells = json.loads(NOTEBOOK.read_text(encoding="utf-8"))["cells"]
    return [c for c in cells if c["cell_type"] == "code"]


CODE = _cells()
CELLS = ["".join(c["source"]) for c in CODE]


def stored(claim_id: str) -> dict:
    """The verdict metadata the notebook's stored run recorded for ``claim_id``."""
    for c in CODE:
        for output in c.get("outputs", []):
            meta = (output.get("metadata") or {}).get(claims.METADATA_KEY)
            if meta and meta.get("id") == claim_id:
                return meta
    raise AssertionError(f"no stored verdict for {claim_id} in {NOTEBOOK.name}")


@pytest.mark.parametrize("claim_id", ["L1", "L2", "L3", "L4", "L5", "L6"])
def test_stored_run_passes_every_check_and_has_the_expected_verdict(claim_id):
    meta = stored(claim_id)
    assert [c["name"] for c in meta["checks"] if not c["passed"]] == []
    assert meta["verdict"] == claims.expected_verdict(claim_id)


def cell(first_line: str) -> str:
    """The code cell whose source starts with ``first_line`` (exactly one)."""
    found = [source for source in CELLS if source.startswith(first_line)]
    assert len(found) == 1, f"{len(found)} code cells start with {first_line!r}"
    return found[0]


def run(*first_lines: str, replace: dict | None = None, **names) -> dict:
    """Run the setup cell and the given cells in a fresh namespace (no figures, no glue);
    ``replace`` maps a line of those cells to a cheaper one (each must occur)."""
    namespace: dict = {}
    exec(CELLS[0], namespace)                       # the imports
    namespace["glue"] = lambda *args, **kwargs: None
    namespace.update(names)
    for first_line in first_lines:
        source = cell(first_line)
        for old, new in (replace or {}).items():
            if old in source:
                source = source.replace(old, new)
        exec(source, namespace)
    unused = [old for old in (replace or {}) if not any(old in cell(f) for f in first_lines)]
    assert not unused, f"lines not found in the cells: {unused}"
    return namespace


def failing(evidence: claims.Evidence) -> list[str]:
    return [c.name for c in evidence.checks if not c.passed]


def verdict(evidence: claims.Evidence) -> str:
    return claims.decide(evidence.checks)


@pytest.fixture(autouse=True)
def _default_seed(monkeypatch):
    monkeypatch.delenv("ATTNREF_SEED", raising=False)
    monkeypatch.setenv("ATTNREF_FIGURES", "off")
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)            # as the notebook's set-up cell does
    yield
    torch.set_default_dtype(previous)                 # later tests on this worker expect float32


# --- L1: the OV circuit ---------------------------------------------------------------------

L1_EXPERIMENT = 'generator = seeding.generator("L1")'
L1_GAUGE = "# The gauge W_V^i"


def test_l1_ov_parity_catches_an_untransposed_output_projection(monkeypatch):
    original = attnref.MultiHeadWeights.from_torch.__func__

    def untransposed(cls, module):     # bug: W_O read as torch stores it, (out, in)
        w = original(cls, module)
        return cls(w.w_q, w.w_k, w.w_v, w.w_o.T.contiguous(), w.b_q, w.b_k, w.b_v, w.b_o)

    monkeypatch.setattr(attnref.MultiHeadWeights, "from_torch", classmethod(untransposed))
    buggy = run(L1_EXPERIMENT, L1_GAUGE, l1=claims.Evidence("L1"))["l1"]
    assert any("Σ_i A_i X W_V^i W_O^i" in name for name in failing(buggy))
    assert verdict(buggy) == claims.NOT_ESTABLISHED


# --- L2: LayerNorm between W_O and W_1 --------------------------------------------------------

L2_EXPERIMENT = 'generator = seeding.generator("L2")'
L2_DEFECT = "# The affine defect of g(a)"
L2_RESIDUAL = "# The residual stream"


def test_l2_defect_checks_catch_a_layer_norm_that_forgets_to_divide(monkeypatch):
    def centring_only(x, params=None):   # bug: (x − μ) without the division: a linear map
        return x - x.mean(dim=-1, keepdim=True)

    monkeypatch.setattr(attnref, "layer_norm", centring_only)
    buggy = run(L2_EXPERIMENT, L2_DEFECT, l2=claims.Evidence("L2"))["l2"]
    names = failing(buggy)
    assert any("relative defect δ at ‖a‖ = ‖x‖" in name for name in names)
    assert any("log–log slope" in name for name in names)


def test_l2_fold_check_catches_a_block_without_its_residual_sum():
    from attnref.book import seeding
    namespace = run(L2_RESIDUAL, l2=claims.Evidence("L2"), d=512,
                    generator=seeding.generator("L2"))
    assert failing(namespace["l2"]) == []
    block = namespace["block"]
    # bug: the block's residual sums dropped (the control of the notebook, as the block itself)
    change = namespace["relative"](block(namespace["H"], residual=False, folded=True),
                                   block(namespace["H"], residual=False))
    assert change < 0.1                          # the notebook's check (≥ 0.1) would fail


# --- L3: the post-LN block against torch ------------------------------------------------------

L3_HELPERS = "# Transcriptions of eq-l3-block in sympy"
L3_DERIVATION = 'l3 = claims.Evidence("L3")'
L3_EXPERIMENT = 'generator = seeding.generator("L3")'


def test_l3_parity_catches_an_unbiased_variance_in_layer_norm(monkeypatch):
    def unbiased(x, params=None):        # bug: σ² with 1/(d − 1), as torch.var's default
        params = attnref.LayerNormParams() if params is None else params
        centred = x - x.mean(dim=-1, keepdim=True)
        out = centred / torch.sqrt(x.var(dim=-1, keepdim=True) + params.eps)
        out = out * params.gain if params.gain is not None else out
        return out + params.bias if params.bias is not None else out

    import attnref.layers
    monkeypatch.setattr(attnref.layers, "layer_norm", unbiased)
    try:
        import attnref.blocks
        monkeypatch.setattr(attnref.blocks, "layer_norm", unbiased)
    except ImportError:
        pass
    relu_only = {'for activation, phi in (("relu", relu_sym), ("gelu", gelu_sym)):':
                 'for activation, phi in (("relu", relu_sym),):'}
    buggy = run(L3_HELPERS, L3_DERIVATION, L3_EXPERIMENT, replace=relu_only)["l3"]
    assert any("attnref.encoder_layer − torch" in name for name in failing(buggy))
    assert verdict(buggy) == claims.NOT_ESTABLISHED


# --- L4: the exact law of the cosine ----------------------------------------------------------

L4_KS = 'generator = seeding.generator("L4")'
L4_MEAN = "# The power of the KS check"


def _l4_names() -> dict:
    import sympy as sp
    d = sp.Symbol("d", integer=True, positive=True)
    return {"l4": claims.Evidence("L4"), "d": d, "second_moment": 1 / d,
            "fourth_moment": 3 / (d * (d + 2))}


def test_l4_checks_catch_a_lost_dimension_at_d_16_and_64(monkeypatch):
    cosine_scores = attnref.cosine_scores

    def one_dimension_lost(queries, keys):    # bug: E[cos²] = 1/(d − 1), e.g. by centring
        centre = lambda x: x - x.mean(dim=-1, keepdim=True)
        return cosine_scores(centre(queries), centre(keys))

    monkeypatch.setattr(attnref, "cosine_scores", one_dimension_lost)
    # Only d = 16 of the KS checks (at the notebook's N) and the mean at d = 64, to stay fast.
    cheaper = {"samples = {4: 30_000, 16: 120_000, 64: 40_000, 256: 10_000}":
               "samples = {16: 120_000, 64: 1_000}",
               "for d_value in (4, 16):": "for d_value in (16,):"}
    buggy = run(L4_KS, L4_MEAN, replace=cheaper, **_l4_names())["l4"]
    names = failing(buggy)
    assert any("KS distance" in name and "d = 16," in name for name in names)
    assert any("E[cos²] at d = 64" in name for name in names)
    assert verdict(buggy) == claims.NOT_ESTABLISHED


# --- L5: parameters of self-attention ---------------------------------------------------------

L5_DERIVATION = 'l5 = claims.Evidence("L5")'
L5_EXPERIMENT = 'generator = seeding.generator("L5")'


def test_l5_condition_checks_catch_a_scaled_basic_form(monkeypatch):
    basic = attnref.parameter_free_self_attention

    def scaled(x, *args, **kwargs):           # bug: a 1/√d that the basic form does not have
        return basic(x / x.shape[-1] ** 0.25, *args, **kwargs)

    monkeypatch.setattr(attnref, "parameter_free_self_attention", scaled)
    buggy = run(L5_DERIVATION, L5_EXPERIMENT)["l5"]
    assert any("scaled_dot_product_attention" in name for name in failing(buggy))
    assert verdict(buggy) == claims.NOT_ESTABLISHED


# --- L6: weights, scores, underflow -----------------------------------------------------------

L6_DERIVATION = 'l6 = claims.Evidence("L6")'
L6_EXPERIMENT = 'generator = seeding.generator("L6")'


def test_l6_threshold_checks_catch_a_softmax_computed_in_half_precision(monkeypatch):
    softmax = attnref.softmax

    def half_precision(logits, dim=-1):       # bug: an autocast-like float16 softmax
        return softmax(logits.to(torch.float16), dim=dim).to(logits.dtype)

    monkeypatch.setattr(attnref, "softmax", half_precision)
    buggy = run(L6_DERIVATION, L6_EXPERIMENT)["l6"]
    names = failing(buggy)
    assert any("float32: first gap with a weight of exactly 0" in name for name in names)
    assert any("float64: first gap with a weight of exactly 0" in name for name in names)
    # The exact-arithmetic counterexample (sympy) still stands, but a recorded counterexample
    # check broke: the evidence is not what the notebook says, so the verdict is not established.
    assert verdict(buggy) == claims.NOT_ESTABLISHED


def test_l6_positivity_check_catches_a_sparsifying_softmax(monkeypatch):
    softmax = attnref.softmax

    def sparsified(logits, dim=-1):           # bug: weights below 1e-3 set to 0
        weights = softmax(logits, dim=dim)
        return torch.where(weights < 1e-3, torch.zeros_like(weights), weights)

    monkeypatch.setattr(attnref, "softmax", sparsified)
    buggy = run(L6_DERIVATION, L6_EXPERIMENT)["l6"]
    assert any("every float64 weight > 0" in name for name in failing(buggy))
