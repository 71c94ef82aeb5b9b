"""The PDF edition (``make pdf``, tools/make_pdf.py) holds the whole book: every claim with its verdict.

The test builds the book with the flags of ``make book`` into a private folder (or takes the site
of ``$ATTENTION_CLAIMS_SITE``), prints it with tools/make_pdf.py (headless Chromium, pypdf) and
reads the PDF's text back with pypdf. It checks that every page of ``_toc.yml`` was printed in
order, every figure loaded and every equation was typeset (make_pdf refuses otherwise), and that
for every verdict the notebooks store, the claim's ID appears in the text next to that verdict
(the verdict box under its proposition and the claims index both print it).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import make_pdf  # noqa: E402

from attnref.book import claims  # noqa: E402

BOOK_FLAGS = ["-n", "-W", "--keep-going"]   # the flags of `make book`
WINDOW = 120   # characters on either side of a claim ID in which its verdict must be printed

pytestmark = pytest.mark.skipif(not make_pdf.CHROMIUM.exists(),
                                reason="no Chromium at /usr/bin/chromium: apt-get install -y chromium")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    if os.environ.get("ATTENTION_CLAIMS_SITE"):
        return Path(os.environ["ATTENTION_CLAIMS_SITE"]).resolve()
    out = tmp_path_factory.mktemp("book")
    jupyter_book = Path(sys.executable).with_name("jupyter-book")
    result = subprocess.run([str(jupyter_book), "build", str(ROOT), *BOOK_FLAGS, "--path-output", str(out)],
                            cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, "the book does not build:\n" + (result.stdout + result.stderr)[-4000:]
    return out / "_build" / "html"


@pytest.fixture(scope="module")
def pdf(site: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pdf") / "attention-claims.pdf"
    # (make_pdf also copies the PDF into the site's downloads/ folder, as `make pdf` does.)
    assert make_pdf.main(["--site", str(site), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def text(pdf: Path) -> str:
    from pypdf import PdfReader

    return " ".join(" ".join((page.extract_text() or "").split()) for page in PdfReader(pdf).pages)


def stored_verdicts() -> list[dict]:
    """Every verdict stored in the outputs of the notebooks of the table of contents (what the
    site renders)."""
    found = []
    in_toc = {Path(page).stem for page in make_pdf.toc_pages() if page.startswith("notebooks/")}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        if path.stem not in in_toc:
            continue
        for cell in json.loads(path.read_text())["cells"]:
            for output in cell.get("outputs", []):
                meta = output.get("metadata", {}).get(claims.METADATA_KEY)
                if meta:
                    found.append(meta | {"notebook": path.stem})
    return found


def test_pdf_has_a_page_per_toc_entry_in_order(pdf: Path) -> None:
    from pypdf import PdfReader

    reader = PdfReader(pdf)
    titles = [item.title for item in reader.outline if not isinstance(item, list)]
    assert len(titles) == len(make_pdf.toc_pages()), titles
    assert not [t for t in titles if "\\" in t], f"TeX in a bookmark (bookmarks are plain text): {titles}"
    assert len(reader.pages) > len(titles)
    assert (pdf.parent / pdf.name).stat().st_size > 100_000


def test_pdf_holds_every_claim_with_its_verdict(text: str) -> None:
    verdicts = stored_verdicts()
    assert verdicts, "no verdict is stored in any notebook"
    missing = []
    for v in verdicts:
        verdict = v["verdict"]
        near = [text[max(0, m.start() - WINDOW): m.end() + WINDOW] for m in re.finditer(rf"\b{v['id']}\b", text)]
        if not near:
            missing.append(f"{v['id']}: not in the PDF")
            continue
        pattern = re.escape(verdict) + (r"(?! under)" if verdict == claims.HOLDS else "")
        if not any(re.search(pattern, window) for window in near):
            missing.append(f"{v['id']} ({v['notebook']}): its verdict '{verdict}' is not printed next to it")
    assert not missing, "\n".join(missing)


def test_pdf_holds_every_claim_of_the_catalogue(text: str) -> None:
    in_toc = set(make_pdf.toc_pages())
    chapters = {c.number for c in claims.CHAPTERS.values() if f"{c.notebook}.html" in in_toc}
    absent = [c.id for c in claims.CLAIMS.values() if c.chapter in chapters and not re.search(rf"\b{c.id}\b", text)]
    assert not absent, f"claims of the built chapters missing from the PDF: {absent}"
