"""attnref.counts: parameter counts against torch modules, Table 3 data, multiply–add counts."""

from __future__ import annotations

import dataclasses
import math

import pytest
import sympy as sp
import torch

import attnref
from attnref import counts


def numel(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("bias", [True, False])
def test_layer_counts_match_torch_with_and_without_bias(bias):
    encoder = torch.nn.TransformerEncoderLayer(32, 4, 64, bias=bias, batch_first=True, device="meta")
    decoder = torch.nn.TransformerDecoderLayer(32, 4, 64, bias=bias, batch_first=True, device="meta")
    assert counts.encoder_layer_parameter_count(32, 4, 64, bias=bias) == numel(encoder)
    assert counts.decoder_layer_parameter_count(32, 4, 64, bias=bias) == numel(decoder)
    assert counts.layer_norm_parameter_count(32, bias=bias) == numel(torch.nn.LayerNorm(32, bias=bias))


@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@pytest.mark.parametrize("bias", [True, False])
def test_whole_model_count_matches_torch_transformer(bias):
    model = torch.nn.Transformer(64, 4, 2, 3, 128, bias=bias, batch_first=True, device="meta")
    # torch.nn.Transformer needs equal encoder/decoder depth in our config: compare per stack.
    config = counts.TransformerConfig(n_layers=2, d=64, d_ff=128, h=4, vocab=0, final_layer_norms=True, bias=bias)
    parts = counts.transformer_parameter_count(config)
    assert parts["encoder"] == numel(model.encoder.layers)
    assert parts["decoder"] == 2 * numel(model.decoder.layers[0])
    assert parts["final_layer_norms"] == numel(model.encoder.norm) + numel(model.decoder.norm)


def test_base_transformer_count_with_shared_embedding():
    model = torch.nn.Transformer(512, 8, 6, 6, 2048, batch_first=True, device="meta")
    parts = counts.transformer_parameter_count(counts.TransformerConfig(final_layer_norms=True))
    assert parts["total"] == numel(model) + 37000 * 512
    assert parts["embeddings"] == 37000 * 512
    unshared = counts.transformer_parameter_count(counts.TransformerConfig(shared_embeddings=False))
    assert unshared["embeddings"] == 3 * 37000 * 512


def test_existing_positional_signatures_still_work():
    assert counts.encoder_layer_parameter_count(64, 4, 256) == counts.encoder_layer_parameter_count(64, 4, 256, None, None, True)
    assert counts.attention_parameter_count(512, 8) == 4 * 512 * 512 + 4 * 512


def test_table3_rows():
    rows = {entry.row: entry for entry in counts.VASWANI2017_TABLE3}
    assert rows["base"].millions == 65 and rows["big"].millions == 213
    assert [rows[f"(A) h={h}"].millions for h in (1, 4, 16, 32)] == [None] * 4
    assert all(rows[f"(A) h={h}"].config.h * rows[f"(A) h={h}"].config.d_k == 512 for h in (1, 4, 16, 32))
    assert rows["(B) d_k=16"].config.d_v == 64 and rows["(C) d=1024"].config.d_k == 128
    # Rows (A) keep h·d_k = d, so their count is the base count exactly.
    base = counts.transformer_parameter_count(rows["base"].config)["total"]
    for h in (1, 4, 16, 32):
        assert counts.transformer_parameter_count(rows[f"(A) h={h}"].config)["total"] == base


def test_implied_vocabulary_brackets_the_rounding():
    config = counts.TransformerConfig()
    low, high = counts.implied_vocabulary(config, 65)

    def total(vocab: int) -> int:
        return counts.transformer_parameter_count(dataclasses.replace(config, vocab=vocab))["total"]

    assert total(math.ceil(low)) >= 64.5e6 > total(math.floor(low))
    assert total(math.floor(high)) <= 65.5e6 < total(math.ceil(high))
    assert high - low == pytest.approx(1e6 / 512)
    unshared_low, unshared_high = counts.implied_vocabulary(dataclasses.replace(config, shared_embeddings=False), 101)
    assert unshared_high - unshared_low == pytest.approx(1e6 / (3 * 512))


def test_implied_vocabulary_bad_millions():
    with pytest.raises(ValueError, match="millions must be a positive int, got 0"):
        counts.implied_vocabulary(counts.TransformerConfig(), 0)


def test_matmul_multiply_adds():
    assert counts.matmul_multiply_adds((2, 3), (3, 5)) == 30
    p, q, r = sp.symbols("p q r", positive=True)
    assert counts.matmul_multiply_adds((p, q), (q, r)) == p * q * r


def test_matmul_multiply_adds_inner_mismatch():
    with pytest.raises(ValueError, match=r"inner dimensions differ: a_shape \(2, 3\) and b_shape \(4, 5\)"):
        counts.matmul_multiply_adds((2, 3), (4, 5))


def test_matmul_multiply_adds_bad_shapes():
    with pytest.raises(ValueError, match="a_shape and b_shape must be"):
        counts.matmul_multiply_adds((2, 3, 4), (4, 5))
    with pytest.raises(ValueError, match="a_shape must be a positive int or a sympy symbol, got 0"):
        counts.matmul_multiply_adds((0, 3), (3, 5))
    with pytest.raises(ValueError, match="b_shape must be a positive int or a sympy symbol, got 2.5"):
        counts.matmul_multiply_adds((2, 3), (3, 2.5))
    negative = sp.Symbol("z", negative=True)
    with pytest.raises(ValueError, match="a_shape must be a positive int or a sympy symbol"):
        counts.matmul_multiply_adds((negative, 3), (3, 5))


def test_score_multiply_adds_formulas():
    n, d, d_k, m = sp.symbols("n d d_k m", positive=True)
    assert sp.expand(counts.score_multiply_adds(n, d, d_k) - (2 * n * d * d_k + n**2 * d_k)) == 0
    assert sp.expand(counts.score_multiply_adds(n, d, d_k, fused=True) - (n * d**2 + n**2 * d)) == 0
    assert sp.expand(counts.score_multiply_adds(n, d, d_k, m=m) - (n * d * d_k + m * d * d_k + n * m * d_k)) == 0
    assert counts.score_multiply_adds(128, 512, 64) == 2 * 128 * 512 * 64 + 128**2 * 64
    assert counts.score_multiply_adds(128, 512, 64, fused=True) == 128 * 512**2 + 128**2 * 512


def test_score_multiply_adds_bad_sizes():
    with pytest.raises(ValueError, match="d_k must be a positive int or a sympy symbol, got -1"):
        counts.score_multiply_adds(4, 8, -1)
    with pytest.raises(ValueError, match="n must be a positive int or a sympy symbol, got True"):
        counts.score_multiply_adds(True, 8, 2)


def test_score_multiply_adds_with_cached_projected_keys():
    n, m, d, d_k = sp.symbols("n m d d_k", positive=True)
    cached = counts.score_multiply_adds(n, d, d_k, m=m, project_keys=False)
    assert sp.expand(cached - (n * d * d_k + n * m * d_k)) == 0
    # The fused form reads the raw inputs: project_keys does not change it.
    assert counts.score_multiply_adds(1, 64, 8, m=100, fused=True, project_keys=False) == 64**2 + 100 * 64
    with pytest.raises(ValueError, match="project_keys must be a bool, got 'no'"):
        counts.score_multiply_adds(4, 8, 2, project_keys="no")
    with pytest.raises(ValueError, match="fused must be a bool, got 1"):
        counts.score_multiply_adds(4, 8, 2, fused=1)


@pytest.mark.parametrize("n, m, d, d_k", [(7, 7, 16, 4), (1, 50, 32, 8), (5, 3, 12, 12)])
def test_score_multiply_adds_match_torch_flop_counter(n, m, d, d_k):
    """torch's FlopCounterMode counts 2 flops per multiply–add of every matmul it runs."""
    from torch.utils.flop_counter import FlopCounterMode

    x_q, x_k = torch.ones(n, d), torch.ones(m, d)          # values do not matter: shapes do
    w_q, w_k = torch.ones(d, d_k), torch.ones(d, d_k)
    w_fused = w_q @ w_k.T
    k_cached = x_k @ w_k
    runs = {
        (False, True, False): lambda: (x_q @ w_q) @ (x_k @ w_k).T,
        (False, False, False): lambda: (x_q @ w_q) @ k_cached.T,
        (True, True, False): lambda: (x_q @ w_fused) @ x_k.T,
        (False, True, True): lambda: ((x_q @ w_q) @ w_k.T) @ x_k.T,     # W^K absorbed into the query
    }
    for (fused, project_keys, absorbed), run in runs.items():
        with FlopCounterMode(display=False) as counter:
            run()
        expected = counts.score_multiply_adds(n, d, d_k, m=m, fused=fused, project_keys=project_keys,
                                              absorbed=absorbed)
        assert counter.get_total_flops() == 2 * expected


def test_absorbed_order_formula_and_the_issue_26_counts():
    n, m, d, d_k = sp.symbols("n m d d_k", positive=True)
    absorbed = counts.score_multiply_adds(n, d, d_k, m=m, absorbed=True)
    assert sp.expand(absorbed - (2 * n * d * d_k + n * m * d)) == 0
    fused = counts.score_multiply_adds(n, d, d_k, m=m, fused=True)
    assert sp.factor(fused - absorbed) == sp.factor(n * d * (d - 2 * d_k))
    # n = 1 query over m = 4096 raw inputs, d = 256, d_k = 32 (issue 26).
    assert counts.score_multiply_adds(1, 256, 32, m=4096, fused=True) == 1_114_112
    assert counts.score_multiply_adds(1, 256, 32, m=4096, absorbed=True) == 1_064_960
    # A tie at d_k = d/2, the fused matrix cheaper only for d_k > d/2.
    assert counts.score_multiply_adds(3, 64, 32, m=9, absorbed=True) == counts.score_multiply_adds(3, 64, 32, m=9, fused=True)
    assert counts.score_multiply_adds(3, 64, 40, m=9, absorbed=True) > counts.score_multiply_adds(3, 64, 40, m=9, fused=True)


def test_absorbed_order_bad_flags():
    with pytest.raises(ValueError, match="absorbed must be a bool, got 'yes'"):
        counts.score_multiply_adds(4, 8, 2, absorbed="yes")
    with pytest.raises(ValueError, match="fused and absorbed are two different orders"):
        counts.score_multiply_adds(4, 8, 2, fused=True, absorbed=True)


# --- every count against the parameters actually allocated (issue 38, item 7) ----------------
# torch's modules always have h·d_v = d and d_k = d_v, where W^O is d × d: a count that takes W^O
# as d² passes every torch comparison. attnref's MultiHeadWeights allocate any d_k, d_v, so
# counting their numbers is an oracle for the layers torch cannot build.

def allocated(weights) -> int:
    """The numbers a MultiHeadWeights holds: every projection, W^O and every bias."""
    return sum(t.numel() for t in (weights.w_q, weights.w_k, weights.w_v, weights.w_o,
                                   weights.b_q, weights.b_k, weights.b_v, weights.b_o) if t is not None)


def test_the_issue_example_counts_286_allocated_numbers():
    weights = attnref.MultiHeadWeights.random(8, 2, 3, 5)          # d = 8, h = 2, d_k = 3, d_v = 5
    assert allocated(weights) == 286
    assert counts.attention_parameter_count(8, 2, 3, 5) == 286     # W^O as d² would say 270
    # the same sum by hand: W_Q, W_K (2·8·3 each), W_V (2·8·5), W^O (2·5 × 8), biases 3+3+5 per head, b_O
    assert 2 * (8 * 3 + 8 * 3 + 8 * 5) + (2 * 5) * 8 + 2 * (3 + 3 + 5) + 8 == 286


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("d, h, d_k, d_v", [(8, 2, 3, 5), (8, 2, None, None), (12, 3, 4, 7), (6, 4, 5, 2),
                                            (16, 1, 2, 16), (10, 5, 1, 3)])
def test_attention_count_equals_the_allocated_parameters(d, h, d_k, d_v, bias):
    weights = attnref.MultiHeadWeights.random(d, h, d_k, d_v, bias=bias)
    assert counts.attention_parameter_count(d, h, d_k, d_v, bias=bias) == allocated(weights)


@pytest.mark.parametrize("bias", [True, False])
def test_layer_counts_equal_the_allocated_parameters_with_h_dv_not_d(bias):
    """An encoder layer with h·d_v ≠ d: attnref's attention weights plus torch's FFN and LayerNorms."""
    d, h, d_k, d_v, d_ff = 8, 2, 3, 5, 16
    attention = allocated(attnref.MultiHeadWeights.random(d, h, d_k, d_v, bias=bias))
    ffn = numel(torch.nn.Sequential(torch.nn.Linear(d, d_ff, bias=bias), torch.nn.Linear(d_ff, d, bias=bias)))
    norm = numel(torch.nn.LayerNorm(d, bias=bias))
    assert counts.encoder_layer_parameter_count(d, h, d_ff, d_k, d_v, bias=bias) == attention + ffn + 2 * norm
    assert counts.decoder_layer_parameter_count(d, h, d_ff, d_k, d_v, bias=bias) == 2 * attention + ffn + 3 * norm
    config = counts.TransformerConfig(n_layers=2, d=d, d_ff=d_ff, h=h, d_k=d_k, d_v=d_v, vocab=0, bias=bias)
    parts = counts.transformer_parameter_count(config)
    assert parts["encoder"] == 2 * (attention + ffn + 2 * norm)
    assert parts["decoder"] == 2 * (2 * attention + ffn + 3 * norm)


def test_a_count_with_w_o_as_d_squared_fails_here(monkeypatch):
    """The issue's mutant: W^O counted as d × d. It agrees with every torch module (h·d_v = d)
    and must fail the allocated-parameter comparison."""
    def w_o_as_d_squared(d, h, d_k=None, d_v=None, bias=True):
        d_k = d // h if d_k is None else d_k
        d_v = d // h if d_v is None else d_v
        return h * (2 * d * d_k + d * d_v) + d * d + (h * (2 * d_k + d_v) + d if bias else 0)

    assert w_o_as_d_squared(512, 8) == counts.attention_parameter_count(512, 8)   # torch cannot tell
    assert w_o_as_d_squared(8, 2, 3, 5) == 270
    monkeypatch.setattr(counts, "attention_parameter_count", w_o_as_d_squared)
    with pytest.raises(AssertionError):
        test_attention_count_equals_the_allocated_parameters(8, 2, 3, 5, True)
    with pytest.raises(AssertionError):
        test_layer_counts_equal_the_allocated_parameters_with_h_dv_not_d(True)
