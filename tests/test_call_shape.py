"""One call shape and one result type (issue 30, item 3), and the in-place fast path of the scores.

* Every attention takes its input tensors positionally and everything else by keyword, with
  the same mask defaults (``mask=None, key_mask=None, causal=False``): checked on the signatures,
  so a new function with a positional ``mask`` or a ``causal=True`` default fails here.
* torch's positional habits (``sdpa(q, k, v, None, 0.1)``) and the old ``f(query, weights)``
  give an error that says what to pass instead.
* ``weights`` holds normalised weights only: ``linear_attention``'s raw scores are in ``scores``.
* The scores are scaled, masked and normalised in place (speed): the caller's tensors are never
  overwritten, and the bits are those of the out-of-place computation autograd uses.
"""

from __future__ import annotations

import inspect

import pytest
import torch

import attnref
from attnref import sequence_layers as sl

ATTENTIONS = {   # function -> its positional parameters
    attnref.scaled_dot_product_attention: ["query", "key", "value"],
    attnref.cosine_attention: ["query", "key", "value"],
    attnref.linear_attention: ["query", "key", "value"],
    attnref.parameter_free_self_attention: ["x"],
    attnref.attention_from_scores: ["scores", "value"],
    attnref.multi_head_attention: ["query", "key", "value"],
    attnref.multi_head_attention_packed: ["query", "key", "value"],
    attnref.head_projections: ["query", "key", "value"],
}


def randn(gen, *shape):
    return torch.randn(*shape, generator=gen, dtype=torch.float64)


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(30)


@pytest.mark.parametrize("function", list(ATTENTIONS), ids=lambda f: f.__name__)
def test_tensors_positional_everything_else_keyword_only(function):
    parameters = inspect.signature(function).parameters
    positional = [p.name for p in parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    assert positional == ATTENTIONS[function]
    masks = {name: parameters[name].default for name in ("mask", "key_mask", "causal") if name in parameters}
    if function is not attnref.head_projections:
        assert masks == {"mask": None, "key_mask": None, "causal": False}
        assert all(parameters[name].kind == inspect.Parameter.KEYWORD_ONLY for name in masks)


@pytest.mark.parametrize("function, parameters", [
    (attnref.luong_general_scores, ["weight"]), (attnref.additive_scores, ["w_query", "w_key", "v", "activation"]),
    (attnref.gat_scores, ["weight", "a", "negative_slope", "nonlinearity"]),
    (attnref.gatv2_scores, ["weight", "a", "negative_slope"]), (sl.token_mixing_linear, ["mixing"]),
    (attnref.scaled_dot_product_attention, ["scale"]), (attnref.cosine_attention, ["beta"]),
    (attnref.multi_head_attention, ["weights"])], ids=lambda x: getattr(x, "__name__", ""))
def test_parameters_and_settings_are_keyword_only(function, parameters):
    signature = inspect.signature(function).parameters
    assert all(signature[name].kind == inspect.Parameter.KEYWORD_ONLY for name in parameters)


def test_torch_style_positional_extras_are_refused_clearly(gen):
    q, k, v = randn(gen, 3, 4), randn(gen, 5, 4), randn(gen, 5, 2)
    with pytest.raises(TypeError, match=r"scaled_dot_product_attention\(\) takes 3 positional arguments but 5"):
        attnref.scaled_dot_product_attention(q, k, v, None, 0.1)      # torch's attn_mask, dropout_p
    with pytest.raises(TypeError, match=r"cosine_attention\(\) takes 3 positional arguments but 4"):
        attnref.cosine_attention(q, k, v, torch.ones(3, 5, dtype=torch.bool))
    weights = attnref.MultiHeadWeights.random(4, 2, generator=gen)
    for form in (attnref.multi_head_attention, attnref.multi_head_attention_packed, attnref.head_projections):
        with pytest.raises(TypeError, match=rf"{form.__name__}\(\) missing 1 required keyword-only argument: 'weights'"):
            form(q, weights)                                          # the old call shape f(query, weights)


def test_linear_attention_weights_are_none_and_scores_are_raw(gen):
    q, k, v = randn(gen, 3, 4), randn(gen, 5, 4), randn(gen, 5, 2)
    keep = torch.rand(3, 5, generator=gen) > 0.4
    result = attnref.linear_attention(q, k, v, mask=keep)
    assert result.weights is None
    assert torch.equal(result.scores, q @ k.T)                        # before the mask, unscaled
    assert torch.allclose(result.output, (q @ k.T).masked_fill(~keep, 0) @ v, atol=1e-14)
    softmax = attnref.scaled_dot_product_attention(q, k, v, mask=keep)
    assert softmax.scores is None and softmax.trace is None
    assert torch.allclose(softmax.weights.sum(-1), torch.ones(3, dtype=torch.float64), atol=1e-12)


@pytest.mark.parametrize("masks", [{}, {"causal": True}, {"mask": "bool"}, {"mask": "additive"}, {"key_mask": True}])
def test_in_place_scores_give_the_bits_of_the_autograd_path_and_spare_the_inputs(gen, masks):
    q, k, v = randn(gen, 2, 6, 4), randn(gen, 2, 6, 4), randn(gen, 2, 6, 3)
    kwargs = dict(masks)
    if kwargs.get("mask") == "bool":
        kwargs["mask"] = torch.rand(6, 6, generator=gen) > 0.3
    elif kwargs.get("mask") == "additive":
        kwargs["mask"] = randn(gen, 2, 6, 6)
    if kwargs.get("key_mask"):
        kwargs["key_mask"] = torch.rand(2, 6, generator=gen) > 0.3
    copies = [t.clone() for t in (q, k, v)] + [m.clone() for m in kwargs.values() if isinstance(m, torch.Tensor)]
    for function in (attnref.scaled_dot_product_attention, attnref.cosine_attention):
        fast = function(q, k, v, **kwargs)                            # no autograd: in place
        recorded = function(*(t.clone().requires_grad_() for t in (q, k, v)), **kwargs)   # out of place
        assert torch.equal(fast.output, recorded.output.detach()) and torch.equal(fast.weights, recorded.weights.detach())
    free = attnref.parameter_free_self_attention(q, **kwargs)
    assert torch.equal(free.output, attnref.parameter_free_self_attention(q.clone().requires_grad_(), **kwargs).output.detach())
    scores = randn(gen, 2, 6, 6)
    before = scores.clone()
    attnref.attention_from_scores(scores, v, **kwargs)
    attnref.softmax(scores)
    assert torch.equal(scores, before)                               # the caller's scores are not the workspace
    after = [q, k, v] + [m for m in kwargs.values() if isinstance(m, torch.Tensor)]
    assert all(torch.equal(a, b) for a, b in zip(after, copies))
