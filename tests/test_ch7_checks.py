"""Chapter 7's checks can fail: for every claim D1–D3, plausible bugs injected into the
notebook's own code or into the attnref functions it calls (the batched layers and helpers of
``attnref.analysis.depth``, attnref's attention and blocks), and NaN injected into each claim's
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
from attnref.analysis import depth

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
    patched = dict(depth._LAYERS)
    patched["attention + skip"] = lambda x, w, eps: depth.self_attention(x, w)
    monkeypatch.setattr(depth, "_LAYERS", patched)
    verdict, checks = run_section("D1")
    assert_caught("D1", verdict, checks, "skip recursion vs direct")


def test_d1_softmax_over_the_queries_is_caught(monkeypatch):
    # Bug: the batched attention normalises over the queries (dim −2) instead of the keys.
    real_softmax = torch.softmax

    def attention(x, w):
        original = torch.softmax
        torch.softmax = lambda t, dim: real_softmax(t, dim=-2)
        try:
            return real_attention(x, w)
        finally:
            torch.softmax = original
    real_attention = depth.self_attention
    monkeypatch.setattr(depth, "self_attention", attention)
    verdict, checks = run_section("D1")
    assert_caught("D1", verdict, checks, "batched attention vs attnref.multi_head_attention")


def test_d1_attnref_scores_scaled_by_one_over_d_k_is_caught(monkeypatch):
    # Bug in attnref: scores divided by d_k instead of √d_k (W_Q scaled by 1/√d_k once more).
    real = attnref.multi_head_attention

    def scaled(query, weights, **kwargs):
        d_k = weights.w_q.shape[-1]
        return real(query, dataclasses.replace(weights, w_q=weights.w_q * d_k ** -0.5), **kwargs)
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
    # Bug: the batched "pre-LN" block normalises after the residual sum (post-LN in disguise).
    def normalised_after(x, w, eps=1e-5, relu_after_sum=False):
        y = depth.layer_norm(x + depth.self_attention(depth.layer_norm(x, eps), w), eps)
        return y + depth.feed_forward(depth.layer_norm(y, eps), w)
    patched = dict(depth._LAYERS)
    patched["pre-LN"] = normalised_after
    monkeypatch.setattr(depth, "_LAYERS", patched)
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


def test_d1_entropy_over_the_wrong_axis_is_caught(monkeypatch):
    # Bug: attention_entropy averages the weights' entropy as if every row were uniform
    # (log n), i.e. it forgot the scores.
    monkeypatch.setattr(depth, "attention_entropy",
                        lambda x, w: torch.full(x.shape[:1], float(torch.tensor(x.shape[-2]).log())))
    verdict, checks = run_section("D1")
    assert_caught("D1", verdict, checks, "attention entropy")


def test_d1_nan_in_the_input_is_caught():
    verdict, checks = run_section("D1", ("d1_x = torch.randn(draws, n, d, generator=generator)",
                                         "d1_x = torch.randn(draws, n, d, generator=generator)\n"
                                         "d1_x[5, 0, 0] = float('nan')"))   # not a parity draw
    assert_caught("D1", verdict, checks, "recursion vs direct float64 residual")


# --- D2 ------------------------------------------------------------------------------------------
def test_d2_pre_ln_layer_that_normalises_after_the_residual_is_caught(monkeypatch):
    # Bug: a "pre-LN" layer that normalises the residual sum (post-LN in disguise).
    def normalised_after(x, layer, **kwargs):
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


def test_d2_batched_layernorm_without_eps_inside_the_root_is_caught(monkeypatch):
    # Bug: the batched LayerNorm divides by (σ + ε) instead of √(σ² + ε).
    def layer_norm(x, eps=1e-5):
        mean = x.mean(dim=-1, keepdim=True)
        return (x - mean) / (((x - mean) ** 2).mean(dim=-1, keepdim=True).sqrt() + eps)
    monkeypatch.setattr(depth, "layer_norm", layer_norm)
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
    # Bug: the "ReLU after the sums" variant applies the ReLU to the branch only (x + ReLU(F(x))).
    def relu_in_branch(x, w, eps=1e-5, relu_after_sum=False):
        y = x + torch.relu(depth.self_attention(depth.layer_norm(x, eps), w))
        return y + torch.relu(depth.feed_forward(depth.layer_norm(y, eps), w))
    patched = dict(depth._LAYERS)
    patched["pre-LN, ReLU after the sums"] = relu_in_branch
    monkeypatch.setattr(depth, "_LAYERS", patched)
    verdict, checks = run_section("D3")
    assert_caught("D3", verdict, checks, "ReLU(x + F(x))")


def test_d3_nan_in_the_input_stops_the_notebook():
    # NaN in the inputs: the Jacobians' SVD refuses non-finite values, so the chapter fails to run.
    with pytest.raises(torch.linalg.LinAlgError):
        run_section("D3", ("d3_x = torch.randn(draws, n, d, generator=generator)",
                           "d3_x = torch.randn(draws, n, d, generator=generator)\n"
                           "d3_x[0, 0, 0] = float('nan')"))


def test_d3_nan_in_the_backward_check_is_caught():
    verdict, checks = run_section("D3", ("direction = torch.randn(draws, n, d, generator=generator)",
                                         "direction = torch.randn(draws, n, d, generator=generator)\n"
                                         "direction[3, 0, 0] = float('nan')"))
    assert_caught("D3", verdict, checks, "one backward pass")
