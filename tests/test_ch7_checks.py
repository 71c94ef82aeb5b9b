"""Chapter 7's checks can fail: for every claim D1–D3, a plausible bug injected into the
notebook's own code (or into the attnref function it calls) moves the claim's verdict away from
the expected one, and the check that catches it is named.

Each test runs the set-up cell and the code cells of one claim section of
``notebooks/07-depth.ipynb`` in this process (plotting cells and the verdict cell are skipped;
``glue`` is a no-op), with one mutation applied, and decides the verdict from the recorded
evidence with ``claims.decide``. A mutation replaces an exact piece of source text (the test
fails, naming the text, if the notebook was reworded) or monkeypatches a function.
"""

from __future__ import annotations

import attnref
from attnref.analysis import depth

import notebook_sections                     # tests/notebook_sections.py
from notebook_sections import assert_caught

NOTEBOOK = "07-depth.ipynb"
CLAIM_IDS = ["D1", "D2", "D3"]


def run_section(claim_id: str, replace: tuple[str, str] | None = None):
    """Run one claim section (optionally with one source mutation); return its verdict and checks."""
    return notebook_sections.run_section(NOTEBOOK, CLAIM_IDS, claim_id, replace)


def test_d1_residual_measured_without_removing_the_mean_is_caught():
    # Bug: the derivation's "residual" is the output itself, not its centred part.
    verdict, checks = run_section("D1", ("centre = sp.eye(n) - sp.ones(n, n) / n",
                                         "centre = sp.eye(n)"))
    assert_caught("D1", verdict, checks, "orders ε⁰, ε¹, ε² vanish")


def test_d1_skip_connection_dropped_is_caught(monkeypatch):
    # Bug: the "attention + skip" variant forgets to add x back.
    patched = dict(depth._LAYERS)
    patched["attention + skip"] = lambda x, w, eps: depth.self_attention(x, w)
    monkeypatch.setattr(depth, "_LAYERS", patched)
    verdict, checks = run_section("D1")
    assert_caught("D1", verdict, checks, "attention + skip")


def test_d2_pre_ln_layer_that_normalises_after_the_residual_is_caught(monkeypatch):
    # Bug: a "pre-LN" layer that normalises the residual sum (post-LN in disguise).
    def normalised_after(x, layer, **kwargs):
        y = attnref.layer_norm(x + attnref.multi_head_attention(attnref.layer_norm(x, layer.norm_1),
                                                                layer.attention).output, layer.norm_1)
        z = y + attnref.feed_forward(attnref.layer_norm(y, layer.norm_2), layer.ffn)
        return attnref.AttentionResult(z, None)
    monkeypatch.setattr(attnref, "pre_ln_layer", normalised_after)
    verdict, checks = run_section("D2")
    assert_caught("D2", verdict, checks, "TransformerEncoderLayer(norm_first=True)")


def test_d2_pre_ln_stack_without_its_final_layernorm_is_caught():
    # Bug: the pre-LN stack's final LayerNorm is left out, so nothing divides by ‖x_L‖.
    verdict, checks = run_section("D2", ("final_norm=True)}", "final_norm=False)}"))
    assert_caught("D2", verdict, checks, "pre-LN, last layer")


def test_d3_jacobian_on_the_wrong_input_is_caught():
    # Bug: the Jacobians are taken at another draw's input (the inputs shifted by one draw).
    verdict, checks = run_section("D3", ("J = depth.jacobian(lambda z: depth.run(z, stack, v)[-1], d3_x)",
                                         "J = depth.jacobian(lambda z: depth.run(z, stack, v)[-1], "
                                         "d3_x.roll(1, 0))"))
    assert_caught("D3", verdict, checks, "one backward pass")
