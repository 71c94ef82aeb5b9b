"""The bibliography (book/references.bib) and what cites it.

Every entry carries an identifier a reader can follow (a URL or a DOI), an arXiv identifier is the
same wherever an entry states it (journal line, eprint, URL), every citation in the book names an
entry, and every short-answer card cites what its source thread itself points to (issue 44 item 11:
Weng's and Bloem's posts, d2l's attention chapters, Phuong & Hutter, nanoGPT, differential
attention; the gated-attention paper beside E1, item 10). The identifiers below were checked
against the papers' and posts' own pages when they were added; the test keeps a swapped or
mistyped one from reaching the page.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
from pybtex.database import parse_file

ROOT = Path(__file__).resolve().parent.parent
BIB = parse_file(str(ROOT / "book" / "references.bib")).entries


def _load_pages():
    spec = importlib.util.spec_from_file_location("claims_index", ROOT / "book" / "_ext" / "claims_index.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    from claimsbook import pages
    return module, pages


index, pages = _load_pages()
BOOK = index.scan_book(ROOT)
ANSWERS = pages.load_answers(ROOT)

#: What each source thread points to (seeds 000–004), by the card that answers it.
THREAD_POINTERS = {
    "activation-after-projections": ["qiu2025gated"],
    "activation-after-residual": ["bloem2019transformers", "ye2024differential"],
    "attention-vs-linear-layer": ["zhang2021dive"],
    "cosine-vs-dot": ["weng2018attention"],
    "fused-matrix": ["phuong2022formal", "karpathy2022nanogpt"],
}
#: The identifier of each, as verified on its own page, and a word of its title.
VERIFIED = {
    "qiu2025gated": ("https://arxiv.org/abs/2505.06708", "Gated Attention"),
    "ye2024differential": ("https://arxiv.org/abs/2410.05258", "Differential"),
    "phuong2022formal": ("https://arxiv.org/abs/2207.09238", "Formal Algorithms"),
    "zhang2021dive": ("https://d2l.ai/chapter_attention-mechanisms-and-transformers/index.html", "Dive into Deep Learning"),
    "weng2018attention": ("https://lilianweng.github.io/posts/2018-06-24-attention/", "Attention"),
    "bloem2019transformers": ("https://peterbloem.nl/blog/transformers", "Transformers from Scratch"),
    "karpathy2022nanogpt": ("https://github.com/karpathy/nanoGPT", "nanoGPT"),
}
ARXIV_ID = re.compile(r"^\d{4}\.\d{4,5}$")
CITE_ROLE = re.compile(r"\{cite(?::[a-z]+)?\}`([^`]+)`")


def _arxiv_ids(fields) -> set[str]:
    ids = set()
    journal = fields.get("journal", "")
    if "arXiv:" in journal:
        ids.add(journal.split("arXiv:")[1].strip())
    if fields.get("archiveprefix", "").lower() == "arxiv":
        ids.add(fields["eprint"])
    url = fields.get("url", "")
    if "arxiv.org/abs/" in url:
        ids.add(url.split("arxiv.org/abs/")[1].strip("/"))
    return ids


@pytest.mark.parametrize("key", sorted(BIB))
def test_every_entry_has_an_identifier_a_reader_can_follow(key):
    fields = BIB[key].fields
    url, doi = fields.get("url", ""), fields.get("doi", "")
    assert url or doi or key == "rush2018annotated", f"{key}: no url and no doi"
    if url:
        assert re.match(r"^https?://[^\s{}]+$", url), f"{key}: url {url!r}"
    if doi:
        assert re.match(r"^10\.\d{4,9}/\S+$", doi), f"{key}: doi {doi!r}"


@pytest.mark.parametrize("key", sorted(BIB))
def test_an_arxiv_identifier_is_the_same_wherever_the_entry_states_it(key):
    ids = _arxiv_ids(BIB[key].fields)
    assert len(ids) <= 1, f"{key}: arXiv identifiers disagree: {sorted(ids)}"
    assert all(ARXIV_ID.match(i) for i in ids), f"{key}: malformed arXiv identifier {sorted(ids)}"


def test_the_references_the_threads_point_to_carry_the_verified_identifiers():
    for key, (url, title_word) in VERIFIED.items():
        assert key in BIB, f"{key} is not in references.bib"
        assert BIB[key].fields["url"] == url, key
        assert title_word.lower() in BIB[key].fields["title"].replace("{", "").replace("}", "").lower(), key


def _cited_keys() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    texts = {p.relative_to(ROOT).as_posix(): p.read_text(encoding="utf-8") for p in (ROOT / "book").glob("*.md")}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        texts[path.name] = "\n".join("".join(c["source"]) for c in cells)
    texts["answers.yml"] = (ROOT / pages.ANSWERS_PATH).read_text(encoding="utf-8")
    for where, text in texts.items():
        for match in CITE_ROLE.finditer(text):
            for key in match[1].split(","):
                found.setdefault(key.strip(), set()).add(where)
    for thread in ANSWERS["threads"]:
        for item in thread.get("reading") or []:
            found.setdefault(item["cite"], set()).add(f"answers.yml reading of {thread['id']}")
    return found


def test_every_citation_names_an_entry():
    missing = {k: sorted(w) for k, w in _cited_keys().items() if k not in BIB}
    assert not missing, missing


def _card(thread) -> str:
    return "\n".join(pages.render_card(BOOK, thread))


def _uncited(answers) -> dict[str, list[str]]:
    by_id = {t["id"]: t for t in answers["threads"]}
    out = {}
    for thread_id, keys in THREAD_POINTERS.items():
        card = _card(by_id[thread_id])
        cited = {k.strip() for m in CITE_ROLE.finditer(card) for k in m[1].split(",")}
        if set(keys) - cited:
            out[thread_id] = sorted(set(keys) - cited)
    return out


def test_each_card_cites_what_its_thread_points_to():
    assert set(THREAD_POINTERS) == {t["id"] for t in ANSWERS["threads"]}
    assert not _uncited(ANSWERS), _uncited(ANSWERS)


def test_the_chapter_ends_cite_them_too():
    """The last page of each chapter repeats its thread's answer: with the same references."""
    for number in (1, 2, 3, 4, 5):
        end = pages.render_chapter_end(BOOK, ANSWERS, number)
        for thread in pages.threads_of_chapter(ANSWERS, number):
            for key in THREAD_POINTERS[thread["id"]]:
                assert f"`{key}`" in end, (number, key)


def test_a_card_without_its_reading_is_caught():
    answers = copy.deepcopy(ANSWERS)
    for thread in answers["threads"]:
        thread.pop("reading", None)
    assert set(_uncited(answers)) == set(THREAD_POINTERS) - {"activation-after-projections"}
    answers["threads"][1]["reading"] = [{"cite": "bloem2019transformers"}]       # no "about"
    assert any("a reading item needs" in p for p in pages.problems(BOOK, answers))
