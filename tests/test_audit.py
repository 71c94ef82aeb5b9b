"""`attnref audit`: the rechecks on a checkpoint it was not written for, the numbers against
independent computations, and every bad input refused in one line with exit status 2 and the
report folder left as it was."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnref.audit import AuditError, audit, read_texts, rechecks
from attnref.audit.cli import main
from attnref.audit.families import detect

minilm = pytest.importorskip("attnref.models.minilm")

TEXTS = ["The cat slept on the warm windowsill all afternoon.",
         "Interest rates rose again in March, and mortgage applications fell.",
         "Add the onions only when the oil is hot enough to make them sizzle."]


@pytest.fixture(scope="module")
def model_dir() -> Path:
    try:
        return minilm.model_dir()
    except (ModuleNotFoundError, FileNotFoundError) as error:
        pytest.skip(f"all-MiniLM-L6-v2 is not installed: {error}")


@pytest.fixture(scope="module")
def report(model_dir, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("audit") / "report"
    result = audit(model_dir, TEXTS, out)
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "report.md"]
    return {"result": result, "out": out}


def test_the_report_files_hold_the_result(report):
    stored = json.loads((report["out"] / "report.json").read_text())
    assert stored["rechecks"].keys() == report["result"]["rechecks"].keys()
    assert stored["model"]["family"] == "bert" and len(stored["model"]["sha256"]["model.safetensors"]) == 64
    page = (report["out"] / "report.html").read_text()
    assert "<svg" in page and "http://" not in page and "https://" not in page   # self-contained
    for cid, entry in stored["rechecks"].items():
        assert f"id='{cid.lower()}'" in page and entry["verdict"] in page


def test_the_numbers_equal_a_direct_computation(report, model_dir):
    """C3's per-head variance ratio, A1's per-block mass on the first token and H2's rank, each
    recomputed here from the encoder's own outputs with loops over rows (not the audit's code)."""
    m = report["result"]["measurements"]
    model = minilm.load(model_dir, dtype=torch.float64)
    tokenizer = minilm.load_tokenizer(model_dir)
    L, h, d_k = model.config.layers, model.config.h, model.config.d_k
    variance = torch.zeros(L, h, dtype=torch.float64)
    first, rows = torch.zeros(L, dtype=torch.float64), 0
    for text in TEXTS:
        ids = torch.tensor([tokenizer.encode(text).ids])
        output = minilm.encode(model, ids)
        n = ids.shape[1]
        rows += n
        for l, layer in enumerate(model.layers):
            x = output.hidden_states[l][0]
            for head in range(h):
                q = x @ layer.attention.w_q[head] + layer.attention.b_q[head]
                k = x @ layer.attention.w_k[head] + layer.attention.b_k[head]
                for i in range(n):
                    variance[l, head] += (k @ q[i]).var(unbiased=False)
            first[l] += output.attentions[l][0][:, :, 0].sum() / h
    ratio = variance / (rows * d_k)
    assert torch.allclose(torch.tensor(m["C3"]["per_head"], dtype=torch.float64), ratio, rtol=1e-4), \
        "the audit's Var_j(q·k)/d_k differs from a loop over rows (float32 model run: rtol 1e-4)"
    assert torch.allclose(torch.tensor(m["A1"]["share_per_block"], dtype=torch.float64), first / rows, rtol=1e-4)
    assert m["H2"]["certified_heads"] == m["H2"]["heads"] == L * h
    assert m["H2"]["d_k"] == d_k


def test_a_copied_model_directory_gives_the_same_numbers(report, model_dir, tmp_path):
    copy = tmp_path / "my-encoder"
    shutil.copytree(model_dir, copy)
    again = audit(copy, TEXTS, tmp_path / "out")
    assert again["measurements"] == report["result"]["measurements"]
    assert {k: v["verdict"] for k, v in again["rechecks"].items()} == \
           {k: v["verdict"] for k, v in report["result"]["rechecks"].items()}
    assert again["model"]["name"] == "my-encoder"


def test_verdicts_follow_the_engine(report):
    from attnref.book import claims
    for cid, entry in report["result"]["rechecks"].items():
        checks = [claims.Check(**{k: v for k, v in c.items() if k in claims.Check.__dataclass_fields__})
                  for c in entry["checks"]]
        assert claims.decide(checks) == entry["verdict"], cid


def _cli(args, capsys) -> tuple[int, str]:
    code = main([str(a) for a in args] + ["--quiet"])
    return code, capsys.readouterr().err


def _untouched(out: Path) -> None:
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"], "the report folder was written into"
    assert not [p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}-")], "a staging folder was left"


@pytest.fixture
def out(tmp_path) -> Path:
    folder = tmp_path / "report"
    folder.mkdir()
    (folder / "keep.txt").write_text("earlier report")
    return folder


def _model_copy(model_dir: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "model-copy"
    shutil.copytree(model_dir, copy)
    return copy


@pytest.mark.parametrize("case", ["missing", "no-config", "bad-json", "unsupported", "not-a-checkpoint"])
def test_bad_checkpoints_are_refused_in_one_line(case, tmp_path, out, capsys):
    path = tmp_path / "ckpt"
    if case != "missing":
        path.mkdir()
    if case == "bad-json":
        (path / "config.json").write_text("{not json")
    if case == "unsupported":
        (path / "config.json").write_text(json.dumps({"model_type": "mamba", "architectures": ["MambaForCausalLM"]}))
    if case == "not-a-checkpoint":
        path = tmp_path / "weights.bin"
        path.write_bytes(b"\0" * 16)
    code, err = _cli([path, "--out", out], capsys)
    assert code == 2 and err.count("\n") == 1 and err.startswith("attnref audit: "), err
    expected = {"missing": "no such file", "no-config": "config.json", "bad-json": "not valid JSON",
                "unsupported": "unsupported architecture mamba", "not-a-checkpoint": "not a checkpoint"}[case]
    assert expected in err
    if case == "unsupported":
        assert "bert" in err and "llama" in err and "gemma3" in err        # what is supported
    _untouched(out)


def test_a_truncated_weight_file_is_refused(model_dir, tmp_path, out, capsys):
    copy = _model_copy(model_dir, tmp_path)
    weights = copy / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 3])
    code, err = _cli([copy, "--texts", _texts(tmp_path, TEXTS), "--out", out], capsys)
    assert code == 2 and err.count("\n") == 1 and "corrupt" in err, err
    _untouched(out)


def _texts(tmp_path: Path, lines: list[str]) -> Path:
    path = tmp_path / "texts.txt"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_an_empty_text_file_is_refused(model_dir, tmp_path, out, capsys):
    code, err = _cli([model_dir, "--texts", _texts(tmp_path, ["", "   "]), "--out", out], capsys)
    assert code == 2 and err.count("\n") == 1 and "holds no text" in err, err
    _untouched(out)


def test_a_text_longer_than_the_context_is_refused(model_dir, tmp_path, out, capsys):
    long = " ".join(["word"] * 700)
    code, err = _cli([model_dir, "--texts", _texts(tmp_path, [TEXTS[0], long]), "--out", out], capsys)
    assert code == 2 and err.count("\n") == 1 and "text 2 has" in err and "context of 512" in err, err
    _untouched(out)


def test_the_default_texts_are_the_books():
    from attnref.analysis.texts import SENTENCES
    assert read_texts(None) == list(SENTENCES)


def test_a_gguf_decoder_is_recognised_without_loading_it():
    smollm = pytest.importorskip("attnref.models.smollm")
    try:
        path = smollm.model_path()
    except FileNotFoundError as error:
        pytest.skip(str(error))
    family, config = detect(path)
    assert family.name == "llama" and config["general.architecture"] == "llama"


def test_the_module_runs_as_a_command(tmp_path):
    """``python -m attnref.audit`` answers a bad path with exit status 2 and one line."""
    done = subprocess.run([sys.executable, "-m", "attnref.audit", str(tmp_path / "nothing"), "--quiet"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and done.stderr.strip().startswith("attnref audit:") and done.stderr.count("\n") == 1


def test_the_stored_report_on_the_books_page_is_consistent(model_dir):
    """data/audit/minilm (shown on the "Check your own model" page): its Markdown is what its JSON
    gives, its verdicts are the engine's, and it was made from the installed weights."""
    import hashlib

    from attnref.audit import report as report_module
    folder = Path(__file__).resolve().parents[1] / "data" / "audit" / "minilm"
    stored = json.loads((folder / "report.json").read_text())
    assert (folder / "report.md").read_text() == report_module.markdown(stored)
    digest = hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest()
    assert stored["model"]["sha256"]["model.safetensors"] == digest
    from attnref.analysis.texts import SENTENCES
    assert stored["texts"]["sha256"] == hashlib.sha256("\n".join(SENTENCES).encode()).hexdigest()
    test_verdicts_follow_the_engine({"result": stored})


# --- the stored reports of the book's models (make audit-models) against the chapters -----------------

ROOT = Path(__file__).resolve().parents[1]


def _printed(notebook: str) -> str:
    """Everything a committed notebook printed (its stored stdout)."""
    nb = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text())
    return "".join("".join(o["text"]) for c in nb["cells"] if c["cell_type"] == "code"
                   for o in c.get("outputs", []) if o.get("name") == "stdout")


def _number(pattern: str, text: str, group: int = 1) -> str:
    import re
    found = re.search(pattern, text)
    assert found, f"the chapter no longer prints {pattern!r}"
    return found.group(group)


def _stored(name: str) -> dict:
    from attnref.audit import book_models
    try:
        return book_models.stored(name)
    except FileNotFoundError as error:
        pytest.fail(str(error))


def test_the_audit_prints_what_chapter_6_prints_on_minilm():
    """Chapter 6 computes its MiniLM rechecks in the notebook; the audit's stored report on MiniLM
    (the same 64 sentences) must give the numbers the chapter prints for the same statistics: H2's
    certified heads and median stable rank, C3's median within-row Var/d_k, A2/L4's mean cosine and
    E[cos²]·d after each block, A1's mass on the first token ([CLS]) per block."""
    m = _stored("minilm")["measurements"]
    out = _printed("06-trained-model")
    certified, heads = _number(r"certified rank \d+: (\d+) of (\d+) heads", out), _number(r"certified rank \d+: (\d+) of (\d+) heads", out, 2)
    assert (int(certified), int(heads)) == (m["H2"]["certified_heads"], m["H2"]["heads"])
    assert _number(r"stable rank [0-9.]+–[0-9.]+ \(median ([0-9.]+)\)", out) == f"{m['H2']['median_stable_rank']:.1f}"
    assert _number(r"within-row Var\[q·k\]/d_k: median ([0-9.]+)", out) == f"{m['C3']['median']['estimate']:.2f}"
    for block, (cos, cos_sq_d) in enumerate(zip(m["anisotropy"]["mean_cos_per_block"],
                                                 m["anisotropy"]["cos_sq_d_per_block"]), start=1):
        line = _number(rf"LayerNorm output {block}: (mean cosine [-0-9.]+, E\[cos²\]·d [0-9.]+)", out)
        assert line == f"mean cosine {cos:.3f}, E[cos²]·d {cos_sq_d:.1f}", (block, line)
    per_layer = _number(r"\[CLS\]: mass [0-9.]+ \(uniform [0-9.]+\); per layer ([0-9., ]+)", out).strip()
    assert per_layer == ", ".join(f"{x:.2f}" for x in m["A1"]["share_per_block"])


def test_the_audit_prints_what_chapter_6b_prints_on_smollm2():
    """Chapter 6b reads SmolLM2's numbers from data/smollm2-measurements (make measure); the audit's
    stored report on SmolLM2 must give the numbers the chapter prints for the same statistics: H2's
    exact-rank heads and median stable rank, A2's range of the mean cosine and d·E[cos²] over the
    blocks, A1's uniform share, and D1 (the stream's and the attention-only path's residual after
    the last block, the late/early rate ratio, and the control without the causal mask)."""
    from attnref.book import claims
    m = _stored("smollm2")["measurements"]
    out = _printed("06b-trained-decoder")
    assert _number(r"exact rank \d+ in (\d+) of \d+ heads", out) == str(m["H2"]["certified_heads"])
    assert _number(r"exact rank \d+ in \d+ of (\d+) heads", out) == str(m["H2"]["heads"])
    assert _number(r"stable rank: median ([0-9.]+)", out) == f"{m['H2']['median_stable_rank']:.1f}"
    cos, cos_sq = m["anisotropy"]["mean_cos_per_block"], m["anisotropy"]["cos_sq_d_per_block"]
    assert _number(r"mean cosine between sentences, blocks 1–\d+: ([0-9.]+–[0-9.]+)", out) == f"{min(cos):.2f}–{max(cos):.2f}"
    assert _number(r"d·E\[cos²\]: ([0-9]+–[0-9]+) against 1", out) == f"{min(cos_sq):.0f}–{max(cos_sq):.0f}"
    assert _number(r"uniform rows would give ([0-9.]+)", out) == f"{m['A1']['uniform']:.2f}"
    d1 = m["D1"]
    assert _number(r"stream after \d+ blocks: ([0-9.]+)", out) == f"{d1['stream_last']['estimate']:.2f}"
    assert _number(r"attention only: (\S+) \[", out) == claims.format_value(d1["pure_last"]["estimate"])
    assert _number(r"layers 21–30 / 6–15: ([0-9.]+)\n", out) == f"{d1['rate_ratio']:.2f}"
    assert _number(r"without the causal mask: r_\d+ = (\S+), ", out) == claims.format_value(d1["free_last"])
    assert _number(r"without the causal mask: .*layers 21–30 / 6–15: ([0-9.]+)", out) == f"{d1['free_rate_ratio']:.2f}"


def test_the_audit_equals_chapter_6bs_stored_sums_on_smollm2():
    """The same comparison at full precision, against the per-sentence sums chapter 6b reads
    (data/smollm2-measurements, an independent pass: decoder_measure's loop, not the audit's):
    A1's share of the mass on the first token per block, C6's coefficient of variation of the key
    norms per head, and D1's three residual curves r_0 … r_L."""
    from attnref.analysis import decoder_measure, trained
    m = _stored("smollm2")["measurements"]
    data, _ = decoder_measure.load()
    h, h_kv = len(m["C6"]["per_head"][0]), data["k_norm"].shape[-1]
    tokens = data["sentence_lengths"].double()
    share = data["sink_mass"].sum((0, 2)) / (h * (tokens - 1).sum())                       # (L,)
    assert torch.allclose(torch.tensor(m["A1"]["share_per_block"], dtype=torch.float64), share, rtol=1e-6, atol=0)
    cv = trained.coefficient_of_variation(data["k_norm"].sum(0), data["k_norm_sq"].sum(0), tokens.sum())   # (L, h_kv)
    assert torch.allclose(torch.tensor(m["C6"]["per_head"], dtype=torch.float64),
                          cv.repeat_interleave(h // h_kv, -1), rtol=1e-6, atol=0)
    for key, spread, total in (("stream", "spread_sq", "total_sq"), ("pure", "pure_spread_sq", "pure_total_sq"),
                               ("free", "free_spread_sq", "free_total_sq")):
        chapter = (data[spread].sum(0) / data[total].sum(0)).sqrt()                       # (L + 1,)
        audit_curve = torch.tensor(m["D1"][f"{key}_per_layer"], dtype=torch.float64)
        assert torch.allclose(audit_curve, chapter, rtol=1e-5, atol=0), key


def test_the_stored_gemma_report_equals_chapter_6cs_measurements():
    """Gemma 3: the audit's A1 share per block against data/gemma3-measurements (tools/measure_gemma.py,
    the loop chapter 6c's own C3/A1 read): the same mass on <bos> from two passes."""
    from attnref.analysis import qknorm_model
    m = _stored("gemma3")["measurements"]
    data, provenance = qknorm_model.load()
    h = provenance["config"]["h"]
    tokens = data["sentence_lengths"].double()
    share = data["sink_mass"].sum((0, 2)) / (h * (tokens - 1).sum())
    assert torch.allclose(torch.tensor(m["A1"]["share_per_block"], dtype=torch.float64), share, rtol=1e-5, atol=0)


def _same(a, b, path: str = "") -> None:
    """``a`` equals ``b`` with floats to 10⁻⁵ relative (the model runs in float32: another CPU's kernels
    move the last bits); everything else exactly."""
    if isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), f"{path}: keys {sorted(a)} vs {sorted(b) if isinstance(b, dict) else b}"
        for k in a:
            _same(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, list):
        assert isinstance(b, list) and len(a) == len(b), f"{path}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{path}[{i}]")
    elif isinstance(a, float) and not isinstance(b, bool):
        assert b == pytest.approx(a, rel=1e-5, abs=1e-12), f"{path}: stored {a}, computed now {b}"
    else:
        assert a == b, f"{path}: stored {a!r}, computed now {b!r}"


def test_the_stored_minilm_report_is_what_the_audit_computes_now(model_dir, tmp_path):
    """Drift: data/audit/minilm (make audit-models) equals a fresh audit of the installed MiniLM on the
    book's texts — every measurement, every check and verdict. (SmolLM2's and Gemma's reports are
    re-made by make audit-models; their numbers are held to chapter 6b's and 6c's stored sums above.)"""
    stored = _stored("minilm")
    again = audit(model_dir, None, tmp_path / "again")
    _same(stored["measurements"], again["measurements"], "measurements")
    assert {k: v["verdict"] for k, v in stored["rechecks"].items()} == {k: v["verdict"] for k, v in again["rechecks"].items()}
    _same([c["value"] for e in stored["rechecks"].values() for c in e["checks"] if isinstance(c["value"], (int, float))],
          [c["value"] for e in again["rechecks"].values() for c in e["checks"] if isinstance(c["value"], (int, float))])
    for key in ("model", "texts", "thresholds"):
        assert stored[key] == json.loads(json.dumps(again[key])), key


# --- D1: the attention-only path and its rule ---------------------------------------------------------

def test_gemma_d1_step_is_the_blocks_attention_update_and_the_control_sees_every_token():
    """On a tiny random Gemma 3 (transformers' modules, tests/test_gemma3.py; sliding window shorter
    than the text): D1's step with the causal mask is exactly what the block adds to the stream
    (its attention update, an independent path: gemma3.block); with the mask it is causal (the first
    row ignores the last token), without it the first row reads the last token — in every block,
    the sliding ones included (a sliding window is causal too: keeping it would fail here)."""
    pytest.importorskip("transformers")
    from test_gemma3 import attnref_model, tiny_model

    from attnref.audit.families import gemma3 as family
    from attnref.models import gemma3
    model = attnref_model(tiny_model(seed=3))
    assert model.config.window < 12 and gemma3.SLIDING in model.config.layer_types
    ids = torch.tensor([5, 17, 3, 44, 9, 12, 21, 8, 30, 2, 41, 7])
    out = gemma3.forward(model, ids, logits=False)
    for l in range(len(model.layers)):
        step = family.attention_branch(model, l)
        h = out.hidden[l].double()
        assert torch.allclose(step(h, True), out.blocks[l].trace.attention_update, rtol=1e-10, atol=1e-12), l
        moved = h.clone()
        moved[-1] += 1.0
        assert torch.equal(step(moved, True)[0], step(h, True)[0]), l
        assert not torch.allclose(step(moved, False)[0], step(h, False)[0]), l


def _d1_measurements(curve: torch.Tensor, free: torch.Tensor) -> dict:
    from attnref.analysis.stats import Interval
    L = curve.numel() - 1
    last = lambda x: Interval(float(x), float(x) * 0.9, float(x) * 1.1, "bootstrap (asymptotic)", 0.05, 2000, float(x) * 0.05)
    return {"D1": {"stream_last": last(0.8), "pure_last": last(curve[-1]), "free_last": float(free[-1]),
                   "rate_ratio": float(rechecks.rate_ratio(curve)), "free_rate_ratio": float(rechecks.rate_ratio(free)),
                   "early_layers": [L // 6 + 1, L // 2], "late_layers": [L - L // 3 + 1, L], "layers": L}}



def test_d1_rate_ratio_against_a_loop_and_the_rule_on_known_curves():
    """rate_ratio against a loop over the layers (chapter 6b's layers 6–15 and 21–30 for L = 30); then
    the rule: a geometric collapse under the mask with an accelerating control holds under the
    condition "no skip connections"; a doubly exponential one (the claim as stated) breaks the
    counterexample, and a control that does not accelerate breaks the supporting check."""
    from attnref.book import claims
    L = 30
    layers = torch.arange(L + 1, dtype=torch.float64)
    geometric = torch.exp(-0.7 * layers)                           # constant rate 0.7
    accelerating = torch.exp(-0.05 * 1.15 ** layers * 10)          # rates grow by 15 % per layer
    rates = [math.log(accelerating[l - 1] / accelerating[l]) for l in range(1, L + 1)]
    loop = (sum(rates[20:30]) / 10) / (sum(rates[5:15]) / 10)
    assert float(rechecks.rate_ratio(accelerating)) == pytest.approx(loop, rel=1e-12)
    assert float(rechecks.rate_ratio(geometric)) == pytest.approx(1.0, rel=1e-9)

    def verdict(curve, free):
        evidence = rechecks._Recheck("D1", "test model")
        rechecks.record(evidence, _d1_measurements(curve, free))
        return claims.decide(evidence.checks)
    assert verdict(geometric, accelerating) == claims.CONDITIONS
    assert verdict(accelerating, accelerating) == claims.NOT_ESTABLISHED     # the claim's own rate: no counterexample
    assert verdict(geometric, geometric) == claims.NOT_ESTABLISHED           # the control fails
    assert verdict(torch.full((L + 1,), 0.5), accelerating) == claims.NOT_ESTABLISHED   # no collapse at all


def test_the_readers_install_holds_what_the_audit_needs_for_gemma():
    """A reader's install (requirements-reader.lock, the bundle's lock) has the Gemma 3 packages the
    audit and chapter 6c read — the main package, its four chunk packages, gguf — at the versions the
    installed ones have (the developers' lock), and the bundle ships the stored reports (data/ whole)."""
    from importlib import metadata
    lock = {line.split("==")[0].lower(): line.split("==")[1].strip()
            for line in (ROOT / "requirements-reader.lock").read_text().splitlines() if "==" in line and not line.startswith("#")}
    from attnref.models import gemma3
    names = [gemma3.PACKAGE] + [f"{gemma3.PACKAGE}-part{i}" for i in range(1, 5)] + ["gguf"]
    for name in names:
        assert name in lock, f"{name} is not in requirements-reader.lock"
        assert lock[name] == metadata.version(name), name
    sys.path.insert(0, str(ROOT / "tools"))
    import make_bundle
    assert "data/audit/" in make_bundle.STORED["06c-qk-norm-model"][0]
