"""The short answers (book/answers.md), the chapter pages' opening verdict tables and their closing
"answer to the thread" — all generated at build time (book/_ext/claimsbook/pages.py) from
book/_data/answers.yml and the verdicts the committed notebooks recorded.

A badge is never typed: each is generated from the recorded verdict. Each text was written for a
verdict, which it names; when a notebook records another verdict (chapter 8's are being rebuilt,
for instance) these tests fail until the text is rewritten, as the build does under -W.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

from attnref.book import claims

ROOT = Path(__file__).resolve().parent.parent


def _load_extension():
    spec = importlib.util.spec_from_file_location("claims_index", ROOT / "book" / "_ext" / "claims_index.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


index = _load_extension()
from claimsbook import pages  # noqa: E402  (on sys.path once the extension is loaded)

BOOK = index.scan_book(ROOT)
ANSWERS = pages.load_answers(ROOT)
#: ``{ref}`Q1 <claim-q1>` {bdg-success}`holds``: a link and the badge generated beside it.
CITED = re.compile(r"\{ref\}`[^`<]*<(?P<target>[^>`]+)>` \{bdg-[a-z-]+\}`(?P<verdict>[^`]+)`")


def _by_target(book) -> dict:
    return {v.target: v for v in book.verdicts}


def _book_with(book, change):
    """A copy of ``book`` with ``change(verdict_output) -> verdict_output`` applied to every verdict."""
    scans = []
    for scan in book.scans:
        scan = copy.copy(scan)
        scan.verdicts = [change(v) for v in scan.verdicts]
        scans.append(scan)
    return index.Book(scans)


def test_the_committed_answers_fit_the_recorded_verdicts() -> None:
    problems = pages.problems(BOOK, ANSWERS)
    assert not problems, "\n".join(problems)


def test_one_card_per_source_question_each_short() -> None:
    threads = ANSWERS["threads"]
    assert len(threads) == 5 and len({t["id"] for t in threads}) == 5
    for t in threads:
        assert "\n" not in t["question"] and t["question"].rstrip().endswith("?")
        assert 1 <= pages.sentences(t["answer"]) <= pages.MAX_ANSWER_SENTENCES, t["answer"]
        assert t["rests_on"], f"{t['id']}: the answer rests on no verdict"
    page = pages.render_answers_page(BOOK, ANSWERS)
    assert page.count("::::{card}") == 5


def test_every_badge_on_the_answers_page_is_the_recorded_verdict() -> None:
    page = pages.render_answers_page(BOOK, ANSWERS)
    by_target = _by_target(BOOK)
    cited = list(CITED.finditer(page))
    assert len(cited) >= sum(len(t["bears_on"]) for t in ANSWERS["threads"])
    for m in cited:
        assert m["target"] in by_target, f"link to a missing target ({m['target']})="
        assert m["verdict"] == by_target[m["target"]].verdict, (m["target"], m["verdict"])


def test_every_link_target_exists() -> None:
    targets = {t for s in BOOK.scans for t in s.targets}
    page = pages.render_answers_page(BOOK, ANSWERS)
    for target in re.findall(r"\{ref\}`[^`<]*<([^>`]+)>`", page):
        assert target in targets, f"({target})= is not a section target of any notebook"
    assert "{doc}" not in page or all((ROOT / f"{d.lstrip('/')}.md").exists() or (ROOT / f"{d.lstrip('/')}.ipynb").exists()
                                      for d in re.findall(r"\{doc\}`[^`<]*<([^>`]+)>`", page))


def test_the_answers_cover_chapters_1_to_8_and_both_models() -> None:
    keys = [k for t in ANSWERS["threads"] for k in t["bears_on"]]
    found = [pages.lookup(BOOK, k) for k in keys]
    assert all(found), [k for k, v in zip(keys, found) if v is None]
    chapters = {claims.CLAIMS[v.id].chapter for v in found}
    assert chapters >= set(range(1, 9)), f"no answer links chapter(s) {set(range(1, 9)) - chapters}"
    # the trained models the answers cite (a model added to the registry may come without an answer yet)
    cited_models = {v.model for v in found if v.model}
    assert len(cited_models) >= 2 and cited_models <= set(claims.MODELS), cited_models


def test_a_changed_verdict_makes_the_answer_and_the_reason_stale() -> None:
    """If Q1 came out *does not hold*, the badge would say so (generated) and the texts written
    for *holds* would be reported."""
    def flip(v):
        return dataclasses.replace(v, verdict=claims.FAILS) if (v.id, v.model) == ("Q1", None) else v
    book = _book_with(BOOK, flip)
    problems = pages.problems(book, ANSWERS)
    assert any("written for Q1 'holds'" in p and "'does not hold'" in p for p in problems), problems
    assert any(p.startswith("reasons: Q1's reason was written for 'holds'") for p in problems), problems
    page = pages.render_answers_page(book, ANSWERS)
    assert "{ref}`Q1 <claim-q1>` {bdg-danger}`does not hold`" in page


def test_a_new_claim_without_a_short_reason_is_reported_here_not_in_the_build() -> None:
    answers = copy.deepcopy(ANSWERS)
    del answers["reasons"]["E5"]
    assert "reasons: no short reason for E5" in " ".join(pages.problems(BOOK, answers))
    assert not pages.problems(BOOK, answers, missing_reasons=False)
    row = next(line for line in pages.render_chapter_top(BOOK, answers, "notebooks/08-training").splitlines()
               if line.startswith("| {ref}`E5 "))
    assert "At equal score parameters the fused form" in row     # the recorded reason's first clause stands in


def test_a_missing_target_is_reported() -> None:
    book = _book_with(BOOK, lambda v: v)
    for scan in book.scans:
        scan.targets = [t for t in scan.targets if t != "claim-e1"]
    assert any("(claim-e1)= is missing" in p for p in pages.problems(book, ANSWERS))


def test_a_text_breaking_the_rules_is_reported() -> None:
    answers = copy.deepcopy(ANSWERS)
    answers["threads"][0]["answer"] += " One. Two. Three."
    answers["reasons"]["Q2"]["reason"] = " ".join(["word"] * 21)
    answers["threads"][1]["answer"] += " [Q6]"
    problems = pages.problems(BOOK, answers)
    assert any("sentences (at most 3)" in p for p in problems)
    assert any("Q2's reason has 21 words" in p for p in problems)
    assert any("cites [Q6] without saying which verdict" in p for p in problems)


@pytest.mark.parametrize("scan", BOOK.scans, ids=lambda s: s.path)
def test_chapter_page_opens_with_its_verdicts(scan) -> None:
    top = pages.render_chapter_top(BOOK, ANSWERS, scan.path)
    rows = [line for line in top.splitlines() if line.startswith("| {ref}")]
    # a chapter that decides its claims again elsewhere (chapter 8 on text): one row per claim, the
    # other verdicts side by side in it (issue 47 item 7)
    own = [v for v in scan.verdicts if v.model is None]
    side = bool(own) and len(own) < len(scan.verdicts) and all(v.id in {o.id for o in own} for v in scan.verdicts)
    shown = own if side else scan.verdicts
    assert len(rows) == len(shown)
    for v in scan.verdicts if side else []:
        row = rows[[o.id for o in own].index(v.id)]
        assert f"<{v.target}>`" in row and f"{{{index.BADGE[v.verdict]}}}`{v.verdict}`" in row, (v.target, row)
    by_target = _by_target(BOOK)
    for row, v in zip(rows, shown):
        assert row.startswith(f"| {{ref}}`{pages._label(v, compact=True)} <{v.target}>`")
        assert f"{{{index.BADGE[v.verdict]}}}`{v.verdict}`" in row
        reason = row.rsplit("|", 2)[-2]
        assert len(reason.split()) <= pages.MAX_REASON_WORDS + 2, reason
    number = pages.chapter_number(scan.path)
    if number <= 5:     # chapters 1–5 point to the later claims that answer the same question
        later = [m["target"] for m in CITED.finditer(top.split("*The same question later")[-1])]
        assert later and all(by_target[t].model or claims.CLAIMS[by_target[t].id].chapter >= 6 for t in later), later
        assert any(claims.CLAIMS[by_target[t].id].chapter in (7, 8) for t in later)


def test_the_notebook_is_read_with_the_table_after_its_title_and_the_answer_at_its_end() -> None:
    path = ROOT / "notebooks" / "02-linear-layers.ipynb"
    text = path.read_text(encoding="utf-8")
    top = pages.render_chapter_top(BOOK, ANSWERS, "notebooks/02-linear-layers")
    end = pages.render_chapter_end(BOOK, ANSWERS, 2)
    nb = json.loads(pages.inject_into_notebook(text, top, end))
    original = json.loads(text)
    assert len(nb["cells"]) == len(original["cells"]) + 1
    first = nb["cells"][0]["source"]
    assert first.startswith("# ") and first.splitlines()[2:3] == ["````{container} claims-table chapter-verdicts"]
    assert nb["cells"][-1]["source"].startswith("## The answer to the thread")
    assert nb["cells"][1:-1] == original["cells"][1:], "only the title cell changes"
    assert path.read_text(encoding="utf-8") == text, "the notebook file itself is never written"


def test_every_chapter_has_an_answer_to_its_thread() -> None:
    for number in range(1, 9):
        end = pages.render_chapter_end(BOOK, ANSWERS, number)
        assert end.startswith("## The answer to the thread"), number
        for m in CITED.finditer(end):
            assert m["verdict"] == _by_target(BOOK)[m["target"]].verdict


def test_each_card_shows_the_claim_each_badge_judges() -> None:
    """A badge beside a true sentence may read *does not hold* (L2: "LayerNorm is not linear"): the
    card shows, for every verdict the answer rests on, the claim as people make it (the registry's
    statement), so the badge never reads as a contradiction of the sentence it follows."""
    page = pages.render_answers_page(BOOK, ANSWERS)
    cards = page.split("::::{card}")[1:]
    assert len(cards) == len(ANSWERS["threads"])
    for thread, card in zip(ANSWERS["threads"], cards):
        judged = card.split("*What each badge judges*")[1].split("*Every claim on this question:*")[0]
        for key in thread["rests_on"]:
            v = pages.lookup(BOOK, key)
            statement = index.inline(claims.CLAIMS[v.id].statement)
            line = next((ln for ln in judged.splitlines() if f"<{v.target}>`" in ln), None)
            assert line is not None, f"{thread['id']}: {key}'s badge has no claim beside it"
            assert f"`{v.verdict}`" in line and statement in line, line
    # a recheck says on which model it was rechecked
    assert "Rechecked on SmolLM2 decoder's trained weights" in page


def test_measured_at_follows_the_recorded_reason() -> None:
    """The depth a training verdict was measured at comes from the recorded reason, not from the card."""
    e2 = BOOK.records("E2")[0]
    for reason, shown in [("At depth 2 the gain is -0.6.", "depth 2"), ("at depths 2, 4 and 8, none helps", "depths 2, 4 and 8"),
                          ("No depth here.", None)]:
        text = pages.measured_at(dataclasses.replace(e2, reason=reason))
        assert (text == f" *(Measured at {shown}.)*") if shown else text == ""


def test_the_glossary_defines_every_verdict_label_and_the_intro_names_them() -> None:
    glossary = (ROOT / "book" / "glossary.md").read_text(encoding="utf-8")
    intro = (ROOT / "book" / "intro.md").read_text(encoding="utf-8")
    for verdict in claims.ALL_VERDICTS:
        assert f"### {verdict}\n" in glossary, verdict
        assert f"*{verdict}*" in intro, f"the landing page does not name the verdict {verdict!r}"


# --- Issue 44 item 10: E1's answer says what E1 measures; the gate beside it is chapter 8's number --

def _answer(thread_id: str, answers=None) -> str:
    return next(t["answer"] for t in (answers or ANSWERS)["threads"] if t["id"] == thread_id)


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+", " ".join(text.split())) if s.strip()]


def e1_problems(answer: str) -> list[str]:
    """E1 judges training (its registry statement): the sentence citing it names what was measured
    and no sentence has it refute "expressiveness"."""
    out = []
    cited = [s for s in _sentences(answer) if "[E1]" in s]
    if not cited or not all("accuracy" in s and "train" in s for s in cited):
        out.append("the sentence citing [E1] does not say that E1 measures accuracy after training")
    if any("expressiveness" in s and "does not hold" in s for s in _sentences(answer)):
        out.append("a sentence has E1 refute expressiveness")
    return out


def test_the_e1_answer_says_what_e1_measures():
    assert "training" in claims.CLAIMS["E1"].statement            # what the badge judges
    assert not e1_problems(_answer("activation-after-projections"))
    old = ("Attention is already nonlinear [Q1]. In a controlled experiment σ on all three projections made "
           "training worse, so the claim that it adds much-needed expressiveness does not hold [E1].")
    assert len(e1_problems(old)) == 2                               # the text before issue 44


#: A comparison row of chapter 8's E1 tables: "| sigmoid output gate − identity | -0.092 | [-0.135, -0.048] |".
GATE_ROW = re.compile(r"\|\s*sigmoid output gate − identity\s*\|\s*([-+]\d\.\d+)\s*\|\s*\[([-+]\d\.\d+),\s*([-+]\d\.\d+)\]")


def chapter8_gate() -> tuple[float, float, float]:
    """The gate's comparison as chapter 8's executed notebook shows it (its stored output)."""
    cells = json.loads((ROOT / "notebooks" / "08-training.ipynb").read_text(encoding="utf-8"))["cells"]
    rows = {m.groups() for c in cells for o in c.get("outputs", [])
            for m in GATE_ROW.finditer("".join(o.get("data", {}).get("text/markdown", "")))}
    assert len(rows) == 1, rows
    return tuple(float(v) for v in rows.pop())


def gate_problems(answer: str, gate: tuple[float, float, float]) -> list[str]:
    estimate, low, high = gate
    sentence = next((s for s in _sentences(answer) if "qiu2025gated" in s), "")
    out = []
    if not sentence:
        out.append("no sentence discusses the gated-attention result (Qiu et al. 2025)")
    if f"{estimate:.3f}".replace("-", "−") not in sentence:
        out.append(f"the gate sentence does not give chapter 8's {estimate:+.3f}")
    if ("lowered" in sentence) != (high < 0):
        out.append(f"'lowered' does not match chapter 8's interval [{low:+.3f}, {high:+.3f}]")
    return out


def test_the_gate_beside_e1_is_chapter_8s_result():
    gate = chapter8_gate()
    assert not gate_problems(_answer("activation-after-projections"), gate)
    # a re-executed chapter 8 with another number, or a gate that no longer lowers the accuracy
    assert gate_problems(_answer("activation-after-projections"), (gate[0] - 0.01, gate[1], gate[2]))
    assert gate_problems(_answer("activation-after-projections"), (0.05, 0.01, 0.09))



# --- Issue 44 item 12: chapters link forward to the later claims their thread's answer rests on ----

def _markdown(notebook: str) -> str:
    cells = json.loads((ROOT / "notebooks" / notebook).read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")


@pytest.mark.parametrize("number, notebook", [(1, "01-nonlinearity.ipynb"), (2, "02-linear-layers.ipynb"),
                                              (3, "03-attention-vs-linear.ipynb"), (5, "05-multi-head.ipynb")])
def test_the_chapter_text_links_forward_to_the_later_claims_of_its_answer(number, notebook):
    """Not only the generated table: the chapter's own text points to the depth and training
    claims (chapters 7, 8) its thread's answer rests on — D3 and E2 from chapter 2, E3 from 3."""
    text = _markdown(notebook)
    for thread in pages.threads_of_chapter(ANSWERS, number):
        for key in thread["rests_on"]:
            v = pages.lookup(BOOK, key)
            if v.model is None and claims.CLAIMS[v.id].chapter in (7, 8):
                assert re.search(r"\{ref\}`[^`<]*<" + re.escape(v.target) + ">`", text), f"{notebook} never links {key}"


def test_chapter_5_names_h5_as_the_answer_to_the_comment_on_arxiv_1906_07510():
    h5 = _markdown("05-multi-head.ipynb").split("(claim-h5)=")[1].split("(claim-h6)=")[0]
    assert "1906.07510" in h5 and "H5" in h5


# --- issue 44 item 12: the seed items closed in chapters 1, 4 and 6c ----------------------------------

def _markdown_section(notebook: str, anchor: str) -> str:
    import json
    from pathlib import Path
    cells = json.loads((Path(__file__).resolve().parent.parent / "notebooks" / notebook).read_text())["cells"]
    text = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    start = next(i for i, t in enumerate(text) if f"({anchor})=" in t)
    return text[start]


def test_q5_says_the_threads_ffn_lacks_w2():
    """The thread describes the feed-forward step as one matrix and an activation: Q5 says the
    Transformer's FFN has a second matrix W₂ and what it does."""
    section = _markdown_section("01-nonlinearity.ipynb", "claim-q5")
    before = section.split("````{prf:proposition}")[0]
    assert "source thread" in before and "$W_2$" in before and "second matrix" in before


def test_c3_says_what_the_papers_footnote_concerns():
    section = _markdown_section("04-cosine-vs-dot.ipynb", "claim-c3")
    before = section.split("````{prf:proposition}")[0]
    assert "footnote" in before and "vaswani2017attention" in before and "trained" in before


def test_g1s_condition_names_the_keys_before_the_rotary_positions():
    import json
    from pathlib import Path
    cells = json.loads((Path(__file__).resolve().parent.parent / "notebooks" / "06c-qk-norm-model.ipynb").read_text())["cells"]
    g1 = [o["metadata"]["attnref_verdict"] for c in cells for o in c.get("outputs", [])
          if o.get("metadata", {}).get("attnref_verdict", {}).get("id") == "G1"]
    assert len(g1) == 1 and any("before the rotary positions" in name for name in g1[0]["conditions"])
