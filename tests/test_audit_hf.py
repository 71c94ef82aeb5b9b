"""`attnref audit` on Hugging Face directories of every family it reads (issue 46): tiny seeded
random-initialised checkpoints built with transformers' own classes and ``save_pretrained``, offline.

Per family: attnref's forward pass from the adapter (block by block, :mod:`attnref.audit.families._hf`)
against transformers' eager forward — every block's output and attention weights to 1e-5 relative
in float32 —, then the audit on the directory (exit status 0), and the rank recheck H2 against a
direct computation from transformers' own weight matrices (the fused :math:`W_Q^h W_K^{g(h)\\top}` of
each head with its own key/value group). Every parameter is moved off its initial value (biases
and norm gains start at 0 or 1, which would hide a missing bias or a wrong gain), and one head of
one block is made rank-deficient, so the rank count is not "every head" by construction."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
pytest.importorskip("safetensors")
tokenizers = pytest.importorskip("tokenizers")

from attnref.analysis.texts import SENTENCES  # noqa: E402
from attnref.audit import audit, rechecks  # noqa: E402
from attnref.audit.cli import main  # noqa: E402
from attnref.audit.families import detect, supported  # noqa: E402

TEXTS = list(SENTENCES[:6])
VOCAB = 192
SPECIALS = ["[UNK]", "<s>", "[CLS]", "[SEP]", "[PAD]"]


def _tokenizer(folder: Path, encoder: bool) -> None:
    """A word-level tokenizer.json over the test texts' words (a decoder's adds <s>, BERT's [CLS] … [SEP])."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors
    words = []
    for text in SENTENCES:
        for w in re.findall(r"\w+|[^\w\s]+", text.lower()):
            if w not in words and len(SPECIALS) + len(words) < VOCAB:
                words.append(w)
    vocab = {w: i for i, w in enumerate(SPECIALS + words)}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    if encoder:
        tok.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", special_tokens=[("[CLS]", 2), ("[SEP]", 3)])
    else:
        tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", 1)])
    tok.save(str(folder / "tokenizer.json"))


def _config(family: str):
    t = transformers
    small = dict(vocab_size=VOCAB, hidden_size=48, intermediate_size=80, num_hidden_layers=3, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=256)
    if family == "llama":
        return t.LlamaConfig(**small, attention_bias=True, rope_theta=500.0,
                             rope_scaling={"rope_type": "linear", "factor": 2.0}), t.LlamaForCausalLM
    if family == "mistral":
        return t.MistralConfig(**small, sliding_window=5), t.MistralForCausalLM
    if family == "qwen2":
        return t.Qwen2Config(**small), t.Qwen2ForCausalLM
    if family == "qwen3":
        return t.Qwen3Config(**{**small, "num_key_value_heads": 1}, head_dim=16), t.Qwen3ForCausalLM
    if family == "gemma3":
        return t.Gemma3TextConfig(**small, head_dim=16, sliding_window=5, query_pre_attn_scalar=16,
                                  layer_types=["sliding_attention", "full_attention", "sliding_attention"]), t.Gemma3ForCausalLM
    if family == "gpt2":
        return t.GPT2Config(vocab_size=VOCAB, n_embd=48, n_layer=3, n_head=4, n_positions=256), t.GPT2LMHeadModel
    if family == "bert":
        return t.BertConfig(vocab_size=VOCAB, hidden_size=48, num_hidden_layers=3, num_attention_heads=4,
                            intermediate_size=80, max_position_embeddings=256), t.BertModel
    raise ValueError(family)


FAMILIES = ["llama", "mistral", "qwen2", "qwen3", "gemma3", "gpt2", "bert"]


def _qk(model, family: str, l: int):
    """transformers' own (W_Q, W_K) of block ``l`` in row form ``(d, h·d_k)``, ``(d, h_kv·d_k)``."""
    if family == "gpt2":
        w = model.transformer.h[l].attn.c_attn.weight                       # Conv1D (in, out) = (d, 3d)
        d = w.shape[0]
        return w[:, :d], w[:, d:2 * d]
    if family == "bert":
        a = model.encoder.layer[l].attention.self
        return a.query.weight.T, a.key.weight.T
    a = model.model.layers[l].self_attn
    return a.q_proj.weight.T, a.k_proj.weight.T


def build(family: str, folder: Path, dtype=torch.float32, shard: str | None = None, seed: int = 46):
    """A seeded random model of ``family`` saved into ``folder`` (with a tokenizer); returns the model."""
    torch.manual_seed(seed)
    config, cls = _config(family)
    model = cls(config).eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=generator))      # biases, gains and matrices off their init
        w_q, _ = _qk(model, family, 1)
        w_q[:, 3] = 0.0                                                   # block 2, head 1: W_Q loses a column
    model.save_pretrained(folder, **({"max_shard_size": shard} if shard else {}))
    if dtype != torch.float32:
        half = cls.from_pretrained(folder, dtype=dtype)
        for f in folder.glob("*.safetensors*"):
            f.unlink()
        half.save_pretrained(folder, **({"max_shard_size": shard} if shard else {}))
        model = cls.from_pretrained(folder, dtype=torch.float32).eval()   # the stored weights, exactly, in float32
    _tokenizer(folder, encoder=family == "bert")
    return model


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max() / b.double().abs().max())


def oracle(family: str, folder: Path, model) -> dict:
    """attnref's blocks against transformers' eager forward on the test texts: the largest relative
    error of the block outputs and of the attention weights, over blocks and texts."""
    fam, config = detect(folder)
    loaded = fam.load(folder, config)
    ids = [loaded.tokenize(t) for t in TEXTS]
    if loaded.prepare is not None:
        loaded.prepare(ids)
    eager = type(model).from_pretrained(folder, attn_implementation="eager", dtype=torch.float32).eval()
    layers = eager.encoder.layer if family == "bert" else eager.transformer.h if family == "gpt2" else eager.model.layers
    captured = []
    hooks = [layer.register_forward_hook(lambda m, i, o: captured.append(o[0] if isinstance(o, tuple) else o))
             for layer in layers]
    worst = {"hidden": 0.0, "weights": 0.0}
    try:
        for text_ids in ids:
            captured.clear()
            with torch.no_grad():
                out = eager(torch.tensor([text_ids]), output_hidden_states=True, output_attentions=True)
                run = loaded.run(text_ids)
            assert len(out.attentions) == len(run.weights) == loaded.layers
            assert _relative(run.hidden[0], out.hidden_states[0][0]) <= 1e-5
            for l in range(loaded.layers):
                worst["hidden"] = max(worst["hidden"], _relative(run.hidden[l + 1], captured[l][0]))
                worst["weights"] = max(worst["weights"], _relative(run.weights[l], out.attentions[l][0]))
    finally:
        for hook in hooks:
            hook.remove()
    return worst


def direct_h2(model, family: str, h: int, h_kv: int) -> tuple[int, list[float]]:
    """From transformers' weights: the heads whose W_Q^h W_K^{g(h)ᵀ} (d × d, float64) has rank d_k
    (``matrix_rank``), and every head's stable rank ‖M‖_F²/‖M‖_2²."""
    full, stable = 0, []
    layers = len(model.encoder.layer) if family == "bert" else len(model.transformer.h) if family == "gpt2" else len(model.model.layers)
    for l in range(layers):
        w_q, w_k = (w.detach().double() for w in _qk(model, family, l))
        d_k = w_q.shape[1] // h
        for head in range(h):
            g = head // (h // h_kv)                                          # its own key/value group
            m = w_q[:, head * d_k:(head + 1) * d_k] @ w_k[:, g * d_k:(g + 1) * d_k].T
            full += int(torch.linalg.matrix_rank(m) == d_k)
            s = torch.linalg.svdvals(m)
            stable.append(float((s ** 2).sum() / s[0] ** 2))
    return full, stable


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    out = {}
    for family in FAMILIES:
        folder = tmp_path_factory.mktemp(family) / f"tiny-{family}"
        # llama: sharded with an index; qwen2: stored in bfloat16; gemma3: float16; the rest float32
        dtype = {"qwen2": torch.bfloat16, "gemma3": torch.float16}.get(family, torch.float32)
        out[family] = (folder, build(family, folder, dtype=dtype, shard="40KB" if family == "llama" else None))
    return out


@pytest.mark.parametrize("family", FAMILIES)
def test_attnref_equals_transformers_eager_block_by_block(family, built):
    folder, model = built[family]
    worst = oracle(family, folder, model)
    assert worst["hidden"] <= 1e-5 and worst["weights"] <= 1e-5, worst


@pytest.mark.parametrize("family", FAMILIES)
def test_the_audit_runs_and_its_rank_recheck_equals_the_weights(family, built, tmp_path, capsys):
    folder, model = built[family]
    texts = tmp_path / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n")
    code = main([str(folder), "--texts", str(texts), "--out", str(tmp_path / "report"), "--quiet"])
    assert code == 0, capsys.readouterr().err
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["model"]["family"] == family
    c = model.config
    h = getattr(c, "num_attention_heads", None) or c.n_head
    h_kv = getattr(c, "num_key_value_heads", None) or h
    full, stable = direct_h2(model, family, h, h_kv)
    h2 = report["measurements"]["H2"]
    assert full == h2["certified_heads"] == 3 * h - 1, (full, h2)             # the one rank-deficient head
    assert h2["median_stable_rank"] == pytest.approx(float(torch.tensor(stable, dtype=torch.float64).median()), rel=1e-9)
    # the adapter's factors, head by head (a wrong key/value group changes a head's fused matrix)
    fam, config = detect(folder)
    loaded = fam.load(folder, config)
    from attnref.analysis import trained
    ours = [float(x) for w_q, w_k in loaded.factors()
            for x in trained.stable_rank(trained.fused_spectrum(w_q, w_k))]
    assert ours == pytest.approx(stable, rel=1e-9)
    if family != "bert":
        assert report["rechecks"]["D1"]["verdict"]                             # D1 ran (3 blocks)
    assert report["compute"] == {"dtype": "float32", "device": "cpu", "layerwise": family != "bert", "note": None}
    validate(report)
    html = (tmp_path / "report" / "report.html").read_text()
    assert "http://" not in html and "https://" not in html                    # self-contained
    assert f"<b>{family}</b> family" in html and report["checkpoint"]["sha256"] in html
    assert f"<th>d</th><td>{report['model']['d']}</td>" in html and f"<th>layers</th><td>3</td>" in html
    for cid, entry in report["rechecks"].items():
        section = html.split(f"<section id='{cid.lower()}'>")[1].split("</section>")[0]
        assert entry["verdict"] in section and "would have failed it" in section
        for check in entry["checks"]:
            assert _escaped(check["measured"]) in section and _escaped(check["fails_if"] or "") in section
    # the book's three models beside the reader's, for every recheck (their stored reports)
    book = report["book_models"]
    assert set(book) == {"minilm", "smollm2", "gemma3"}, sorted(book)
    for name, entry in book.items():
        assert entry["label"] in html
        for cid, verdict in entry["verdicts"].items():
            if cid in report["rechecks"]:
                section = html.split(f"<section id='{cid.lower()}'>")[1].split("</section>")[0]
                assert f"{_escaped(entry['label'])}: <span class='badge' style='background:" in section and verdict in section
        assert entry["numbers"]["H2"]["heads"] == json.loads((ROOT / "data" / "audit" / name / "report.json")
                                                              .read_text())["measurements"]["H2"]["heads"]


ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "attnref" / "audit" / "report.schema.json"


def _escaped(text: str) -> str:
    import html
    return html.escape(str(text))


def validate(report: dict) -> None:
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.Draft202012Validator(schema).validate(json.loads(json.dumps(report)))


def test_the_schema_refuses_a_report_that_does_not_follow_it(built, tmp_path):
    """The schema file is what the package ships (the report names its version) and it can fail:
    a report without its compute record, with a verdict outside the book's five, or with a
    short hash is refused."""
    jsonschema = pytest.importorskip("jsonschema")
    from attnref.audit import REPORT_VERSION
    from attnref.audit import report as report_module
    assert report_module.SCHEMA == SCHEMA and json.loads(SCHEMA.read_text())["properties"]["schema"]["const"] == REPORT_VERSION
    folder, _ = built["gpt2"]
    good = json.loads(json.dumps(audit(folder, TEXTS, tmp_path / "r")))
    validate(good)
    broken = [dict(good), json.loads(json.dumps(good)), json.loads(json.dumps(good))]
    del broken[0]["compute"]
    broken[1]["rechecks"]["H2"]["verdict"] = "probably"
    broken[2]["checkpoint"]["sha256"] = "abc"
    for report in broken:
        with pytest.raises(jsonschema.ValidationError):
            validate(report)


def test_sharded_and_half_precision_checkpoints_are_read_as_stored(built):
    folder, _ = built["llama"]
    assert (folder / "model.safetensors.index.json").is_file() and len(list(folder.glob("*.safetensors"))) > 1
    fam, config = detect(folder)
    loaded = fam.load(folder, config)
    assert loaded.details["files"] == len(list(folder.glob("*.safetensors")))
    for family, stored in (("qwen2", "BF16"), ("gemma3", "F16")):
        fam, config = detect(built[family][0])
        assert fam.load(built[family][0], config).details["stored_dtypes"] == [stored]


def test_bfloat16_compute_is_recorded_beside_every_bound(built, tmp_path):
    folder, _ = built["qwen3"]
    report = audit(folder, TEXTS, tmp_path / "bf16", dtype="bfloat16")
    assert report["compute"]["dtype"] == "bfloat16" and "bfloat16" in report["compute"]["note"]
    for entry in report["rechecks"].values():
        for check in entry["checks"]:
            assert check["held_to"].endswith("(computed in bfloat16)") and check["precision"] == "bfloat16"
    html = (tmp_path / "bf16" / "report.html").read_text()
    assert "computed in bfloat16" in html


def test_cuda_device(built, tmp_path):
    if not torch.cuda.is_available():
        pytest.skip("torch sees no CUDA device on this machine")
    folder, _ = built["llama"]
    on_gpu = audit(folder, TEXTS, tmp_path / "gpu", device="cuda")
    on_cpu = audit(folder, TEXTS, tmp_path / "cpu")
    assert on_gpu["compute"]["device"].startswith("cuda")
    assert on_gpu["measurements"]["H2"] == on_cpu["measurements"]["H2"]


def test_a_device_torch_does_not_see_and_a_bad_dtype_are_one_line(built, tmp_path, capsys):
    folder, _ = built["llama"]
    bad = [["--dtype", "float8"]] + ([] if torch.cuda.is_available() else [["--device", "cuda"]]) + [["--device", "tpu"]]
    for args in bad:
        code = main([str(folder), "--out", str(tmp_path / "r"), "--quiet", *args])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and args[0] in err, err
    assert not (tmp_path / "r").exists()


# --- fixes (issue 46, item 6): each test fails on the old behaviour --------------------------------------

def test_d1_with_fewer_than_three_blocks_is_not_established_with_its_reason(tmp_path):
    """Two blocks: the old rule compared "layers 3–2" with "layers 1–1" and passed."""
    folder = tmp_path / "two-blocks"
    t = transformers
    torch.manual_seed(0)
    t.LlamaForCausalLM(t.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2)).save_pretrained(folder)
    _tokenizer(folder, encoder=False)
    report = audit(folder, TEXTS, tmp_path / "out")
    d1 = report["rechecks"]["D1"]
    assert d1["verdict"] == "not established"
    reasons = [c for c in d1["checks"] if not c["passed"]]
    assert len(reasons) == 1 and "at least 3 blocks" in reasons[0]["name"], reasons
    assert report["measurements"]["D1"]["rate_ratio"] is None


def test_a_missing_extra_is_named_as_missing_not_as_a_corrupt_file(built, tmp_path, monkeypatch, capsys):
    """safetensors not installed (simulated): the old BERT path said "model.safetensors is corrupt"."""
    for family in ("bert", "llama"):
        folder, _ = built[family]
        for name in [m for m in sys.modules if m == "safetensors" or m.startswith("safetensors.")]:
            monkeypatch.delitem(sys.modules, name)
        monkeypatch.setitem(sys.modules, "safetensors", None)
        monkeypatch.setitem(sys.modules, "safetensors.torch", None)
        code = main([str(folder), "--texts", str(_texts(tmp_path)), "--out", str(tmp_path / "r"), "--quiet"])
        err = capsys.readouterr().err
        monkeypatch.undo()
        assert code == 2 and err.count("\n") == 1, err
        assert "corrupt" not in err and "not installed" in err and "pip install 'attnref[models]'" in err, err


def _texts(tmp_path: Path) -> Path:
    path = tmp_path / "texts.txt"
    path.write_text("\n".join(TEXTS) + "\n")
    return path


def test_every_refusal_names_the_supported_families_in_one_form(tmp_path, capsys):
    """An unsupported architecture names the closest supported family and the list; the old message
    said "unsupported architecture llama … supported: llama (.gguf)" for a Llama directory."""
    listing = supported()
    for name in ("bert", "gemma3", "gpt2", "llama", "mistral", "qwen2", "qwen3"):
        assert re.search(rf"\b{name} \((Hugging Face directory|Hugging Face directory or \.gguf)\)", listing), name
    cases = {"mixtral": "mistral", "gemma2": "gemma3", "roberta": "bert", "qwen2_moe": "qwen2"}
    for model_type, nearest in cases.items():
        folder = tmp_path / model_type
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"model_type": model_type}))
        code = main([str(folder), "--out", str(tmp_path / "r"), "--quiet"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1, err
        assert f"unsupported architecture {model_type}" in err and f"closest supported: {nearest};" in err, err
        assert err.rstrip().endswith(f"supported: {listing}"), err
    # a feature a supported family does not run: the same form
    folder = tmp_path / "llama3-rope"
    t = transformers
    t.LlamaForCausalLM(t.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                                     num_attention_heads=4, rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                     "original_max_position_embeddings": 64})).save_pretrained(folder)
    _tokenizer(folder, encoder=False)
    code = main([str(folder), "--out", str(tmp_path / "r"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "llama with rotary scaling 'llama3'" in err and err.rstrip().endswith(f"supported: {listing}"), err


def test_a_truncated_shard_and_a_missing_shard_are_one_line(built, tmp_path, capsys):
    import shutil
    source, _ = built["llama"]
    expected = {"truncated": "corrupt", "missing": "is missing", "no-weights": "no model.safetensors",
                "pytorch-bin": "save it again with save_pretrained", "no-tokenizer": "no usable tokenizer",
                "bad-index": "not a valid shard index"}
    for case, words in expected.items():
        folder = tmp_path / case
        shutil.copytree(source, folder)
        shards = sorted(folder.glob("model-*.safetensors"))
        if case == "truncated":
            shards[0].write_bytes(shards[0].read_bytes()[: shards[0].stat().st_size // 2])
        elif case == "missing":
            shards[0].unlink()
        elif case in ("no-weights", "pytorch-bin"):
            for f in shards + [folder / "model.safetensors.index.json"]:
                f.unlink()
            if case == "pytorch-bin":
                (folder / "pytorch_model.bin").write_bytes(b"\0" * 64)
        elif case == "no-tokenizer":
            (folder / "tokenizer.json").unlink()
        else:
            (folder / "model.safetensors.index.json").write_text("{}")
        code = main([str(folder), "--texts", str(_texts(tmp_path)), "--out", str(tmp_path / "r"), "--quiet"])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and words in err, (case, err)


def test_a_registered_recheck_is_measured_recorded_and_reported(built, tmp_path, monkeypatch):
    """rechecks.register (the extension point for new rechecks, /tmp/team/audit-extension.md): a recheck
    registered for a claim the audit does not check itself is measured on the same pass, decided by
    the engine's rule and written into the report; a measure that returns None leaves it out."""
    from attnref.book import claims
    monkeypatch.setattr(rechecks, "EXTENSIONS", {})
    seen = {}

    def measure(model, sums, long_ids, paths):
        seen["layers"] = model.layers
        return {"tokens": int(sums.tokens.sum())}

    def record(evidence, m):
        evidence.supporting.at_least("tokens read", m["C1"]["tokens"], 1, kind=claims.REAL_MODEL)
        evidence.exact("tokens read, again", m["C1"]["tokens"], m["C1"]["tokens"], kind=claims.REAL_MODEL)
    rechecks.register("C1", measure, record)
    with pytest.raises(ValueError, match="own rechecks"):
        rechecks.register("H2", measure, record)
    folder, _ = built["mistral"]
    report = audit(folder, TEXTS, tmp_path / "r")
    assert seen["layers"] == 3 and report["measurements"]["C1"]["tokens"] == report["texts"]["tokens"]
    assert report["rechecks"]["C1"]["verdict"] == claims.HOLDS and list(report["rechecks"])[-1] == "C1"
    validate(report)
    rechecks.register("C1", lambda *a: None, record)
    assert "C1" not in audit(folder, TEXTS, tmp_path / "r2")["rechecks"]


def test_the_text_part_of_a_multimodal_gemma3_checkpoint(built, tmp_path):
    """A Gemma3ForConditionalGeneration directory (model_type gemma3, text_config, tensors under
    language_model.model.*, a vision tower that has layers.0.self_attn.q_proj too): the adapter reads
    the language model's tensors and computes exactly what it computes from the text-only checkpoint
    (which the oracle test holds to transformers). Made by renaming the tiny Gemma 3's tensors: building
    transformers' multimodal class costs seconds of vision-tower set-up."""
    from safetensors.torch import load_file, save_file
    source, _ = built["gemma3"]
    folder = tmp_path / "gemma3-mm"
    folder.mkdir()
    tensors = {f"language_model.{k}": v for k, v in load_file(str(source / "model.safetensors")).items()}
    tensors["vision_tower.vision_model.encoder.layers.0.self_attn.q_proj.weight"] = torch.randn(32, 32, dtype=torch.float16)
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    text = json.loads((source / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({"model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
                                                   "text_config": text, "vision_config": {"model_type": "siglip_vision_model"}}))
    (folder / "tokenizer.json").write_bytes((source / "tokenizer.json").read_bytes())
    runs = []
    for path in (source, folder):
        fam, config = detect(path)
        assert fam.name == "gemma3"
        loaded = fam.load(path, config)
        runs.append(loaded.run(loaded.tokenize(TEXTS[0])))
    for a, b in zip(runs[0].hidden + runs[0].weights, runs[1].hidden + runs[1].weights):
        assert torch.equal(a, b)


def test_the_memory_section_of_the_page_is_the_measurement():
    """book/audit.md's memory table and sentences are tools/audit_memory.py's rendering of
    data/audit-memory.json (no number typed by hand), and the measurement meets issue 46's bar:
    on the ~1 B checkpoint the audit's peak above the floor is within 2x one block + embedding rows
    + activations, and below the whole model's load."""
    sys.path.insert(0, str(ROOT / "tools"))
    import audit_memory
    data = json.loads((ROOT / "data" / "audit-memory.json").read_text())
    page = (ROOT / "book" / "audit.md").read_text()
    assert audit_memory.markdown(data) in page
    big = data["checkpoints"]["24"]
    assert 0.9e9 <= big["parameters"] <= 1.3e9 and big["ratio_to_expected"] <= 2
    assert big["audit"]["peak_rss_gib"] < big["whole"]["peak_rss_gib"]
    assert data["extrapolation_7b"]["the book's 64 texts"]["audit_peak_rss_gib"] < data["extrapolation_7b"]["goal_gib"]


def test_a_nan_in_the_weights_is_one_line(tmp_path, capsys):
    """A NaN in a block's weights: attnref's input checks refuse it in the block-by-block pass, and the
    audit says so in one line (exit status 2), not with a traceback."""
    from safetensors.torch import load_file, save_file
    t = transformers
    torch.manual_seed(1)
    folder = tmp_path / "nan"
    t.LlamaForCausalLM(t.LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                                     num_attention_heads=4, num_key_value_heads=2)).save_pretrained(folder)
    _tokenizer(folder, encoder=False)
    tensors = load_file(str(folder / "model.safetensors"))
    tensors["model.layers.1.mlp.up_proj.weight"][0, 0] = float("nan")
    save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    capsys.readouterr()                                                   # save_pretrained's progress bar
    code = main([str(folder), "--texts", str(_texts(tmp_path)), "--out", str(tmp_path / "r"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "could not be run" in err, err


def test_d1_rule_on_known_curves_below_and_at_three_blocks():
    """The rule alone, on curves that collapse geometrically with an accelerating control (what holds
    under "no skip connections" at any depth from 3 on): with 2 blocks the old rule compared "layers
    3–2" with "layers 1–1" and gave *holds under conditions* (checked against the rule before the fix);
    now 1 or 2 blocks give *not established*, with the reason as the one failing check."""
    from attnref.analysis.stats import Interval
    from attnref.book import claims

    def verdict(L: int):
        layers = torch.arange(L + 1, dtype=torch.float64)
        pure, free = torch.exp(-5.0 * layers), torch.exp(-0.05 * (3.0 if L < 10 else 1.15) ** layers)
        last = lambda x: Interval(float(x), float(x) * 0.9, float(x) * 1.1, "bootstrap (asymptotic)", 0.05, 2000, float(x) * 0.05)
        enough = L >= rechecks.D1_MIN_BLOCKS
        m = {"D1": {"stream_last": last(0.8), "pure_last": last(pure[-1]), "free_last": float(free[-1]),
                    "rate_ratio": float(rechecks.rate_ratio(pure)) if enough else None,
                    "free_rate_ratio": float(rechecks.rate_ratio(free)) if enough else None,
                    "early_layers": [L // 6 + 1, L // 2], "late_layers": [L - L // 3 + 1, L], "layers": L}}
        evidence = rechecks._Recheck("D1", "test model")
        rechecks.record(evidence, m)
        return claims.decide(evidence.checks), evidence.checks
    for L in (1, 2):
        decided, checks = verdict(L)
        assert decided == claims.NOT_ESTABLISHED and [c.passed for c in checks] == [False], L
        assert "at least 3 blocks" in checks[0].name
    assert verdict(3)[0] == claims.CONDITIONS and verdict(30)[0] == claims.CONDITIONS
