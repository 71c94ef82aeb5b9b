"""One hook for a new attention: every per-head attention (SDPA, QK-norm, sigmoid, cosine, …) goes
through multi-head attention, the layers, the decoder block and a training step by one argument,
``attention=``, with the call shape of attnref's SDPA. Each variant is compared with an
independent formula (written out here, or transformers' Gemma3RMSNorm), not with itself.
"""

from __future__ import annotations

import math

import pytest
import torch

import attnref
from attnref import qknorm


def _gemma_rms_norm(x, w, eps):
    """Gemma 3's RMSNorm as transformers writes it: float32 statistic, gain (1 + w) in float32."""
    work = x.float()
    normalised = work * torch.rsqrt(work.pow(2).mean(-1, keepdim=True) + eps)
    return (normalised * (1.0 + w.float())).to(x.dtype)


def _qk_norm_formula(q, k, v, wq, wk, eps=1e-6):
    """softmax(norm(q) norm(k)ᵀ / √d_k) v, by the formula in float64 with explicit loops over rows."""
    def norm(x, w):
        rms = torch.sqrt((x * x).mean(-1, keepdim=True) + eps)
        return x / rms * (1 + w)
    qn, kn = norm(q.double(), wq.double()), norm(k.double(), wk.double())
    scores = qn @ kn.transpose(-2, -1) / math.sqrt(q.shape[-1])
    weights = torch.exp(scores - scores.amax(-1, keepdim=True))
    weights = weights / weights.sum(-1, keepdim=True)
    return weights @ v.double(), weights


def test_qk_rms_norm_equals_gemma3_rmsnorm():
    """fails_if: the gain is w instead of 1 + w, ε outside the square root, or the mean is a sum."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 5, 8, generator=g) * 3
    w = torch.randn(8, generator=g)
    assert torch.equal(qknorm.qk_rms_norm(x, w, eps=1e-6), _gemma_rms_norm(x, w, 1e-6))
    for dtype in (torch.bfloat16, torch.float16):
        assert torch.equal(qknorm.qk_rms_norm(x.to(dtype), w.to(dtype)), _gemma_rms_norm(x.to(dtype), w.to(dtype), 1e-6))
    # ε matters where the row is small: the two conventions (inside / outside the root) differ there
    small = torch.full((1, 4), 1e-3)
    assert torch.allclose(qknorm.qk_rms_norm(small, eps=1e-6), small / math.sqrt(1e-6 + 1e-6), rtol=1e-6)
    assert torch.allclose(qknorm.qk_rms_norm(x, w, unit_offset=False), _gemma_rms_norm(x, w - 1, 1e-6), rtol=1e-6)


def test_qk_rms_norm_of_huge_rows_does_not_overflow():
    """fails_if: x² is summed directly (1e20² overflows float32: the row would become zeros)."""
    x = torch.tensor([[1e20, -2e20, 3e20, 5e19]])
    exact = x.double() / x.double().pow(2).mean(-1, keepdim=True).sqrt()
    assert torch.allclose(qknorm.qk_rms_norm(x).double(), exact, rtol=1e-6)


def test_qk_norm_attention_matches_its_formula():
    """fails_if: the keys are not normalised, the scale is dropped, or the gains are swapped."""
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 5, 8, generator=g, dtype=torch.float64) * 4 for _ in range(3))
    wq, wk = torch.randn(8, generator=g, dtype=torch.float64), torch.randn(8, generator=g, dtype=torch.float64)
    ours = qknorm.qk_norm_attention(q, k, v, query_weight=wq, key_weight=wk)
    output, weights = _qk_norm_formula(q, k, v, wq, wk)
    assert torch.allclose(ours.output, output, atol=1e-12) and torch.allclose(ours.weights, weights, atol=1e-12)
    bound = qknorm.qk_norm(wq, wk)
    assert torch.equal(bound(q, k, v).output, ours.output)
