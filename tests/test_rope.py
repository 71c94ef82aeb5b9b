"""attnref.rope: parity with transformers' Llama rotary code (offline), the relative-offset
identity, gradients, devices and bad input."""

from __future__ import annotations

import math

import pytest
import torch

from attnref import rope
from conftest import randn

llama = pytest.importorskip("transformers.models.llama.modeling_llama")
from transformers import LlamaConfig  # noqa: E402


def llama_rotary(d_k: int, base: float, heads: int = 2) -> "llama.LlamaRotaryEmbedding":
    config = LlamaConfig(hidden_size=d_k * heads, num_attention_heads=heads, head_dim=d_k,
                         rope_theta=base, max_position_embeddings=4096)
    return llama.LlamaRotaryEmbedding(config)


@pytest.mark.parametrize("d_k, base", [(2, 10000.0), (8, 10000.0), (16, 500.0), (64, 1e6)])
def test_rotate_matches_apply_rotary_pos_emb_in_float64(gen, d_k, base):
    batch, heads, n = 2, 3, 11
    q, k = randn(gen, batch, heads, n, d_k), randn(gen, batch, heads, n, d_k)
    # Per-sequence position ids (batch, n), as transformers passes them: offsets 0 and 37.
    positions = torch.arange(n).expand(batch, n) + torch.tensor([[0], [37]])
    cos, sin = rope.cos_sin(positions, d_k, base, dtype=torch.float64)            # (batch, n, d_k)
    q_ref, k_ref = llama.apply_rotary_pos_emb(q, k, cos, sin)                     # unsqueeze_dim=1: heads
    q_ours = rope.rotate(q, positions[:, None, :], base)                          # (batch, heads, n, d_k)
    k_ours = rope.rotate(k, positions[:, None, :], base)
    assert (q_ours - q_ref).abs().max() <= 1e-14 * q.abs().max()
    assert (k_ours - k_ref).abs().max() <= 1e-14 * k.abs().max()


def test_rotate_half_is_llamas(gen):
    x = randn(gen, 3, 5, 12)
    assert torch.equal(rope.rotate_half(x), llama.rotate_half(x))


@pytest.mark.parametrize("d_k, base", [(8, 10000.0), (16, 500.0), (32, 1e6), (128, 10000.0)])
def test_tables_match_llama_rotary_embedding(d_k, base):
    """LlamaRotaryEmbedding computes its frequencies and angles in float32 whatever the input's
    dtype; attnref's tables agree with it to float32 round-off of the angle t·θ."""
    module = llama_rotary(d_k, base)
    ours = rope.frequencies(d_k, base, dtype=torch.float32)
    assert torch.allclose(ours, module.inv_freq, rtol=4 * torch.finfo(torch.float32).eps, atol=0)
    positions = torch.tensor([[0, 1, 2, 7, 100, 1000, 4095]])
    x = torch.zeros(1, 7, d_k, dtype=torch.float64)
    cos_ref, sin_ref = module(x, positions)                                       # (1, 7, d_k), float64
    cos, sin = rope.cos_sin(positions, d_k, base, dtype=torch.float64)
    # |δ(tθ)| ≤ t·θ·(a few float32 ulps) bounds the difference of cos and sin.
    slack = 4 * torch.finfo(torch.float32).eps * positions.to(torch.float64)[..., None] + 1e-15
    assert ((cos - cos_ref).abs() <= slack).all()
    assert ((sin - sin_ref).abs() <= slack).all()
    assert cos_ref.dtype == torch.float64


@pytest.mark.parametrize("d_k, base", [(4, 10000.0), (10, 100.0), (16, 10000.0)])
def test_scores_depend_only_on_the_offset(gen, d_k, base):
    """rotate(q, i) rotate(k, j)ᵀ = q R_{j−i} kᵀ for every pair of positions."""
    n = 9
    q, k = randn(gen, n, d_k), randn(gen, n, d_k)
    positions = torch.tensor([0.0, 1, 2, 5, 11, 40, 41, 300, 2047])
    scores = rope.rotate(q, positions, base) @ rope.rotate(k, positions, base).T   # (n, n)
    for i in range(n):
        for j in range(n):
            offset = (positions[j] - positions[i]).item()
            expected = q[i] @ rope.rotation_matrix(offset, d_k, base, dtype=torch.float64) @ k[j]
            assert abs(scores[i, j] - expected) <= 1e-12 * (1 + abs(expected))


def test_rotation_matrix_is_a_one_parameter_group(gen):
    d_k, base = 8, 10000.0
    R = lambda t: rope.rotation_matrix(t, d_k, base, dtype=torch.float64)       # noqa: E731
    eye = torch.eye(d_k, dtype=torch.float64)
    assert torch.allclose(R(0), eye, atol=0)
    assert torch.allclose(R(3) @ R(-3), eye, atol=1e-14)
    assert torch.allclose(R(5).T, R(-5), atol=1e-15)
    assert torch.allclose(R(2) @ R(7), R(9), atol=1e-13)
    x = randn(gen, 4, d_k)
    assert torch.allclose(rope.rotate(x, torch.full((4,), 6.0), base), x @ R(6).T, atol=1e-14)


def test_frequencies_formula_and_distinctness():
    theta = rope.frequencies(6, 100.0, dtype=torch.float64)
    assert torch.allclose(theta, torch.tensor([1.0, 100 ** (-1 / 3), 100 ** (-2 / 3)], dtype=torch.float64))
    assert (theta[1:] < theta[:-1]).all()


def test_default_positions_and_broadcasting(gen):
    x = randn(gen, 2, 3, 5, 4)
    assert torch.equal(rope.rotate(x), rope.rotate(x, torch.arange(5)))
    per_batch = torch.stack([torch.arange(5), torch.arange(5) + 3])[:, None, :]   # (2, 1, 5)
    out = rope.rotate(x, per_batch)
    assert torch.allclose(out[1], rope.rotate(x[1], torch.arange(5) + 3), atol=0)


def test_float32_stays_float32_and_norms_are_kept(gen):
    x = randn(gen, 6, 8, dtype=torch.float32)
    out = rope.rotate(x, torch.arange(6))
    assert out.dtype == torch.float32 and out.device == x.device
    assert torch.allclose(out.norm(dim=-1), x.norm(dim=-1), rtol=1e-6)
    assert rope.rotation_matrix(torch.tensor(2.0, dtype=torch.float32), 4).dtype == torch.float32


def test_gradcheck(gen):
    x = randn(gen, 2, 5, 6).requires_grad_()
    positions = torch.tensor([0.0, 1.0, 3.0, 8.0, 20.0], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, p: rope.rotate(x, p, 50.0), (x, positions))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda(gen):
    x = randn(gen, 4, 8).cuda()
    out = rope.rotate(x, torch.arange(4, device="cuda"))
    assert out.device.type == "cuda"
    assert torch.allclose(out.cpu(), rope.rotate(x.cpu(), torch.arange(4)), atol=1e-14)
    assert rope.rotation_matrix(3, 8, device="cuda").device.type == "cuda"


def test_bad_input(gen):
    x = randn(gen, 5, 6)
    with pytest.raises(ValueError, match=r"d_k must be even .* d_k = 5"):
        rope.frequencies(5)
    with pytest.raises(ValueError, match="d_k must be a positive int, got 0"):
        rope.frequencies(0)
    with pytest.raises(ValueError, match="d_k must be a positive int, got True"):
        rope.rotation_matrix(1, True)
    with pytest.raises(ValueError, match="base must be > 0, got -2"):
        rope.frequencies(4, -2.0)
    with pytest.raises(ValueError, match="base must be finite, got nan"):
        rope.rotate(x, base=math.nan)
    with pytest.raises(ValueError, match="base must be a real number, got 'a'"):
        rope.frequencies(4, "a")
    with pytest.raises(ValueError, match=r"x must have an even last dimension .* shape \(5, 7\)"):
        rope.rotate(randn(gen, 5, 7))
    with pytest.raises(ValueError, match=r"x must have at least 2 dimensions, got shape \(6,\)"):
        rope.rotate(randn(gen, 6))
    with pytest.raises(ValueError, match=r"x must have a floating dtype .* got torch.int64"):
        rope.rotate(torch.ones(5, 6, dtype=torch.long))
    with pytest.raises(ValueError, match=r"positions of shape \(4,\) do not match the n = 5 tokens"):
        rope.rotate(x, torch.arange(4))
    with pytest.raises(ValueError, match=r"positions of shape \(3, 5\) do not broadcast with x of shape \(2, 5, 6\)"):
        rope.rotate(randn(gen, 2, 5, 6), torch.arange(15).reshape(3, 5))
    with pytest.raises(ValueError, match="positions must hold integer or real positions, got dtype torch.bool"):
        rope.rotate(x, torch.ones(5, dtype=torch.bool))
    with pytest.raises(ValueError, match="positions must be finite"):
        rope.rotate(x, torch.tensor([0.0, 1, 2, math.inf, 4]))
    with pytest.raises(ValueError, match="positions must be a torch.Tensor"):
        rope.rotate(x, [0, 1, 2, 3, 4])
    with pytest.raises(ValueError, match=r"offset must be one number, got a tensor of shape \(2,\)"):
        rope.rotation_matrix(torch.tensor([1.0, 2.0]), 4)
    with pytest.raises(ValueError, match="offset must be finite, got inf"):
        rope.rotation_matrix(math.inf, 4)
    with pytest.raises(ValueError, match="dtype must be a floating torch.dtype, got torch.int64"):
        rope.rotation_matrix(1, 4, dtype=torch.long)
