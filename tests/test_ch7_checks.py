"""Chapter 7's checks can fail: for every claim D1–D3, plausible bugs injected into the
notebook's own code or into the attnref functions it calls (the helpers of
``attnref.analysis.depth``, the variants of ``attnref.blocks``, attnref's attention and batched
weights), and NaN injected into each claim's
inputs, move the claim's verdict away from the expected one, and the check that catches each is
named.

Each test runs the set-up cell and the code cells of one claim section of
``notebooks/07-depth.ipynb`` in this process (plotting cells and the verdict cell are skipped;
``glue`` is a no-op), with one mutation applied, and decides the verdict from the recorded
evidence with ``claims.decide``. A mutation replaces an exact piece of source text (the test
fails, naming the text, if the notebook was reworded) or monkeypatches a function.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import attnref
from attnref import blocks
from attnref.analysis import depth, logit_scale
from attnref.layers import select

import notebook_sections                     # tests/notebook_sections.py
from notebook_sections import assert_caught

NOTEBOOK = "07-depth.ipynb"
CLAIM_IDS = ["D1", "D2", "D3"]


def run_section(claim_id: str, replace: tuple[str, str] | None = None):
    """Run one claim section (optionally with one source mutation); return its verdict and checks."""
    return notebook_sections.run_section(NOTEBOOK, CLAIM_IDS, claim_id, replace)


@pytest.fixture(autouse=True)
def quiet(monkeypatch):
    monkeypatch.setenv("ATTNREF_FIGURES", "off")
    yield


# --- D1 ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("claim_id", CLAIM_IDS)
def test_the_unmutated_section_gives_the_expected_verdict(claim_id):
    # without a bug: so a bug test below cannot pass on a section that already fails in this process
    verdict, checks = run_section(claim_id)
    assert verdict == notebook_sections.claims.CLAIMS[claim_id].expected, [c.name for c in checks if not c.passed]


def test_d1_residual_measured_without_removing_the_mean_is_caught():
    # Bug: the derivation's "residual" is the output itself, not its centred part.
    verdict, checks = run_section("D1", ("centre = sp.eye(n) - sp.ones(n, n) / n",
                                         "centre = sp.eye(n)"))
    assert_caught("D1", verdict, checks, "orders ε⁰, ε¹, ε² vanish")


def test_d1_skip_connection_dropped_is_caught(monkeypatch):
    # Bug: the "attention + skip" variant forgets to add x back.
    monkeypatch.setitem(blocks.VARIANTS, "attention + skip", blocks.Variant(norm=None, skip=False, ffn=False))
    verdict, checks = run_section("D1")
    assert_caught("D1", verdict, checks, "skip recursion vs direct")


def test_d1_batched_weights_that_give_every_draw_draw_0_s_are_caught(monkeypatch):
    # Bug: batched attention weights broadcast draw 0's weights to every draw.
    real = blocks.multi_head_attention

    def first_draw_only(query, *args, weights, **kwargs):
        return real(query, *args, weights=select(weights, (slice(0, 1),)) if weights.batch_shape else weights,
                    **kwargs)
    monkeypatch.setattr(blocks, "multi_head_attention", first_draw_only)
    verdict, checks = run_section("D1")
    assert_caught("D1", verdict, checks, "batched attention vs attnref.multi_head_attention")


def test_d1_attnref_scores_scaled_by_one_over_d_k_is_caught(monkeypatch):
    # Bug in attnref: scores divided by d_k instead of √d_k (W_Q scaled by 1/√d_k once more).
    real = attnref.multi_head_attention

    def scaled(query, *args, weights, **kwargs):
        d_k = weights.w_q.shape[-1]
        return real(query, *args, weights=dataclasses.replace(weights, w_q=weights.w_q * d_k ** -0.5), **kwargs)
    monkeypatch.setattr(attnref, "multi_head_attention", scaled)
    verdict, checks = run_section("D1")
    assert_caught("D1", verdict, checks, "batched attention vs attnref.multi_head_attention")


def test_d1_residual_measured_from_the_first_token_is_caught(monkeypatch):
    # Bug: the relative residual subtracts the first token instead of the mean token.
    def from_first(x):
        return torch.linalg.matrix_norm(x - x[..., :1, :]) / torch.linalg.matrix_norm(x)
    monkeypatch.setattr(depth, "relative_residual", from_first)
    verdict, checks = run_section("D1")
    assert_caught("D1", verdict, checks, "recursion vs direct float64 residual")


def test_d1_branch_scale_ignored_by_the_skip_recursion_is_caught(monkeypatch):
    # Bug: skip_recursion drops its scale argument, so the 1/√L branch is a plain skip.
    real = depth.skip_recursion
    monkeypatch.setattr(depth, "skip_recursion", lambda x, stack, scale=1.0: real(x, stack))
    verdict, checks = run_section("D1")
    assert_caught("D1", verdict, checks, "branch × 1/√96")


def test_d1_pre_ln_that_normalises_the_sum_is_caught(monkeypatch):
    # Bug: the "pre-LN" variant normalises after the residual sum (post-LN in disguise).
    monkeypatch.setitem(blocks.VARIANTS, "pre-LN", blocks.Variant(norm="post"))
    verdict, checks = run_section("D1")
    assert_caught("D1", verdict, checks, "pre-LN blocks")


def test_d1_gradient_helper_that_ignores_names_is_caught(monkeypatch):
    # Bug: layer_gradient_norms ignores `names` (every weight counted as W_Q, W_K).
    real = depth.layer_gradient_norms
    monkeypatch.setattr(depth, "layer_gradient_norms",
                        lambda x, stack, variant, target, final_norm=False, names=None:
                        real(x, stack, variant, target, final_norm))
    verdict, checks = run_section("D1")
    assert_caught("D1", verdict, checks, "W_Q, W_K get ≤ 1 %")


def test_d1_entropy_of_uniform_rows_is_caught(monkeypatch):
    # Bug: attention_entropy gives every row the entropy of a uniform row (log m), i.e. it
    # forgot the weights.
    monkeypatch.setattr(logit_scale, "attention_entropy",
                        lambda weights: torch.full(weights.shape[:-1], float(torch.tensor(weights.shape[-1]).log())))
    verdict, checks = run_section("D1")
    assert_caught("D1", verdict, checks, "attention entropy")


@pytest.mark.parametrize("claim_id", ["D1", "D3"])
def test_nan_in_the_input_stops_the_section(claim_id):
    # A NaN in one draw's input: attnref's own layers, which chapter 7 runs, refuse it with a
    # ValueError naming the NaN before any check, Jacobian or verdict is computed.
    name = f"{claim_id.lower()}_x"
    with pytest.raises(ValueError, match="NaN"):
        run_section(claim_id, (f"{name} = torch.randn(draws, n, d, generator=generator)",
                               f"{name} = torch.randn(draws, n, d, generator=generator)\n"
                               f"{name}[5, 0, 0] = float('nan')"))


# --- D2 ------------------------------------------------------------------------------------------
def test_d2_pre_ln_layer_that_normalises_after_the_residual_is_caught(monkeypatch):
    # Bug: a "pre-LN" layer that normalises the residual sum (post-LN in disguise).
    def normalised_after(x, *, weights, **kwargs):
        layer = weights
        y = attnref.layer_norm(x + attnref.multi_head_attention(attnref.layer_norm(x, layer.norm_1),
                                                                weights=layer.attention).output, layer.norm_1)
        z = y + attnref.feed_forward(attnref.layer_norm(y, layer.norm_2), layer.ffn)
        return attnref.AttentionResult(z, None)
    monkeypatch.setattr(attnref, "pre_ln_layer", normalised_after)
    verdict, checks = run_section("D2")
    assert_caught("D2", verdict, checks, "TransformerEncoderLayer(norm_first=True)")


def test_d2_pre_ln_stack_without_its_final_layernorm_is_caught():
    # Bug: the pre-LN stack's final LayerNorm is left out, so nothing divides by ‖x_L‖.
    verdict, checks = run_section("D2", ("final_norm=True)}", "final_norm=False)}"))
    assert_caught("D2", verdict, checks, "pre-LN, last layer")


def test_d2_batched_ffn_that_gives_every_draw_the_last_draw_s_is_caught(monkeypatch):
    # Bug: a batched FFN applies the last draw's weights to every draw (draw 0 stays right).
    real = blocks.feed_forward

    def last_draw_only(x, ffn):
        return real(x, select(ffn, (slice(-1, None),)) if ffn.batch_shape else ffn)
    monkeypatch.setattr(blocks, "feed_forward", last_draw_only)
    verdict, checks = run_section("D2")
    assert_caught("D2", verdict, checks, "vs attnref.stack_layers")


def test_d2_gradients_of_the_wrong_layer_order_are_caught(monkeypatch):
    # Bug: layer_gradient_norms returns the layers output-first (reversed): the profile and the
    # "last layer" are read from the wrong end.
    real = depth.layer_gradient_norms
    monkeypatch.setattr(depth, "layer_gradient_norms", lambda *a, **k: real(*a, **k).flip(0))
    verdict, checks = run_section("D2")
    assert_caught("D2", verdict, checks, "grows toward the output")


def test_d2_nan_in_the_target_is_caught():
    verdict, checks = run_section("D2", ("target = torch.randn(draws, n, d, generator=generator)",
                                         "target = torch.randn(draws, n, d, generator=generator)\n"
                                         "target[0, 0, 0] = float('nan')"))
    assert_caught("D2", verdict, checks, "every gradient norm finite")


# --- D3 ------------------------------------------------------------------------------------------
def test_d3_jacobian_on_the_wrong_input_is_caught():
    # Bug: the Jacobians are taken at another draw's input (the inputs shifted by one draw).
    verdict, checks = run_section("D3", ("J = depth.jacobian(lambda z: depth.run(z, stack, v)[-1], d3_x)",
                                         "J = depth.jacobian(lambda z: depth.run(z, stack, v)[-1], "
                                         "d3_x.roll(1, 0))"))
    assert_caught("D3", verdict, checks, "one backward pass")


def test_d3_transposed_jacobian_is_caught(monkeypatch):
    # Bug: depth.jacobian returns rows = input coordinates (the transpose).
    real = depth.jacobian
    monkeypatch.setattr(depth, "jacobian", lambda f, x: real(f, x).transpose(-1, -2))
    verdict, checks = run_section("D3")
    assert_caught("D3", verdict, checks, "one backward pass")


def test_d3_relu_inside_the_branch_instead_of_after_the_sum_is_caught(monkeypatch):
    # Bug: the "ReLU after the sums" variant applies the ReLU to the branches only
    # (x + ReLU(F(x))), through the variant's attention hook and the FFN.
    def relu_attention(x, **kwargs):
        result = attnref.multi_head_attention(x, **kwargs)
        return result._replace(output=torch.relu(result.output))
    real_ffn = blocks.feed_forward
    monkeypatch.setattr(blocks, "feed_forward", lambda x, ffn: torch.relu(real_ffn(x, ffn)))
    monkeypatch.setitem(blocks.VARIANTS, "pre-LN, ReLU after the sums",
                        blocks.Variant(norm="pre", attention=relu_attention))
    verdict, checks = run_section("D3")
    assert_caught("D3", verdict, checks, "ReLU(x + F(x))")


def test_d3_nan_in_the_backward_check_is_caught():
    verdict, checks = run_section("D3", ("direction = torch.randn(draws, n, d, generator=generator)",
                                         "direction = torch.randn(draws, n, d, generator=generator)\n"
                                         "direction[3, 0, 0] = float('nan')"))
    assert_caught("D3", verdict, checks, "one backward pass")
