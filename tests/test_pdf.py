"""The PDF edition (``make pdf``, tools/make_pdf.py) holds the whole book and navigates like one.

The test builds the book with the flags of ``make book`` into a private folder (or takes the site
of ``$ATTENTION_CLAIMS_SITE``), prints it once with tools/make_pdf.py (headless Chromium, pypdf)
and reads the PDF back with pypdf: its text, with the position, font and size of every run; its
link annotations; its outline; its page labels. It checks that

* every page of ``_toc.yml`` was printed in order, every figure loaded and every equation was
  typeset (make_pdf refuses otherwise), and every claim's ID is printed next to its verdict;
* no link points to the temporary print server, links into the book jump to a page of the PDF,
  and a link to a claim lands on the page that prints that claim's heading;
* every page but the title page prints its number, and the page labels say the same;
* there is a bookmark per page of the table of contents and, nested under its chapter, one per
  claim, landing on the page that prints the claim's ID;
* every chapter prints at one scale (its title at the same size as every other title; its body
  text at the stylesheet's 12 pt: Chromium shrinks a whole page when one output is too wide);
* no line of code runs past the right margin; no page but a part's last is mostly empty.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

import site_build                              # tests/site_build.py

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import make_pdf  # noqa: E402

from attnref.book import claims  # noqa: E402

BOOK_FLAGS = ["-n", "-W", "--keep-going"]   # the flags of `make book`
NUMBER = r"\d+(\.\d+)*\.?\s+"   # a section's number before its title: "1.1. Q1 · …"
WINDOW = 120   # characters on either side of a claim ID in which its verdict must be printed

pytestmark = pytest.mark.skipif(not make_pdf.CHROMIUM.exists(),
                                reason="no Chromium at /usr/bin/chromium: apt-get install -y chromium")


def _site(tmp_path_factory) -> Path:
    return site_build.built_site(tmp_path_factory)   # one build per test run (tests/site_build.py)


@pytest.fixture(scope="module")
def pdf(tmp_path_factory) -> Path:
    if os.environ.get("ATTENTION_CLAIMS_PDF"):   # a PDF printed already (while changing these tests)
        return Path(os.environ["ATTENTION_CLAIMS_PDF"]).resolve()
    site = _site(tmp_path_factory)
    out = tmp_path_factory.mktemp("pdf") / "attention-claims.pdf"
    # (make_pdf also copies the PDF into the site's downloads/ folder, as `make pdf` does.)
    assert make_pdf.main(["--site", str(site), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def reader(pdf: Path):
    from pypdf import PdfReader

    return PdfReader(pdf)


@pytest.fixture(scope="module")
def pages(reader) -> list[dict]:
    """Per page: its text (whitespace collapsed), its text runs ``(text, x, y, size, font)`` in
    PDF points (size = the font size times the vertical scale of the text and page matrices) and
    its images' vertical extents ``(bottom, top)``."""
    found = []
    for page in reader.pages:
        runs = []

        def visit(text, cm, tm, font, size, runs=runs):
            if text.strip():
                scale = abs(tm[3] * cm[3]) or 1
                runs.append((text, cm[4] + tm[4] * cm[0], cm[5] + tm[5] * cm[3], size * scale,
                             str(font.get("/BaseFont", "")) if font else ""))

        images = []
        resources = page.get("/Resources")
        xobjects = resources.get_object().get("/XObject") if resources is not None else None
        names = {n for n, ref in xobjects.get_object().items() if ref.get_object().get("/Subtype") == "/Image"} \
            if xobjects is not None else set()

        def draw(op, args, cm, tm, names=names, images=images):
            if op == b"Do" and args and args[0] in names:   # an image: the unit square under the matrix
                images.append(tuple(sorted((cm[5], cm[5] + cm[3]))))

        text = page.extract_text(visitor_text=visit, visitor_operand_before=draw) or ""
        found.append({"text": " ".join(text.split()), "runs": runs, "images": images,
                      "width": float(page.mediabox.width), "height": float(page.mediabox.height)})
    return found


@pytest.fixture(scope="module")
def text(pages: list[dict]) -> str:
    return " ".join(p["text"] for p in pages)


def chapters_of(reader) -> list[tuple[str, int, int, list]]:
    """The top-level bookmarks as ``(title, first page index, end page index, children)``."""
    items, outline = [], reader.outline
    for k, item in enumerate(outline):
        if isinstance(item, list):
            continue
        children = outline[k + 1] if k + 1 < len(outline) and isinstance(outline[k + 1], list) else []
        items.append([item.title, reader.get_destination_page_number(item), None, children])
    for k, item in enumerate(items):
        item[2] = items[k + 1][1] if k + 1 < len(items) else len(reader.pages)
    return [tuple(i) for i in items]


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


def test_pdf_has_a_page_per_toc_entry_in_order(pdf: Path, reader) -> None:
    chapters = chapters_of(reader)
    titles = [c[0] for c in chapters]
    assert len(titles) == len(make_pdf.toc_pages()), titles
    every = titles + [child.title for c in chapters for child in c[3]]
    assert not [t for t in every if "\\" in t or "<" in t], f"TeX or HTML in a bookmark (plain text only): {every}"
    starts = [c[1] for c in chapters]
    assert starts == sorted(starts) and len(set(starts)) == len(starts), f"bookmarks out of order: {starts}"
    assert len(reader.pages) > len(titles)
    assert (pdf.parent / pdf.name).stat().st_size > 100_000


def _links(reader):
    for index, page in enumerate(reader.pages):
        for ref in page.get("/Annots") or []:
            annotation = ref.get_object()
            if annotation.get("/Subtype") == "/Link":
                yield index, annotation


def test_links_stay_inside_the_pdf_or_go_to_other_hosts(reader) -> None:
    """No link to the print server; a link into the book is a jump to a page of this PDF."""
    page_refs = {page.indirect_reference.idnum: k for k, page in enumerate(reader.pages)}
    local, jumps, external, bad = [], 0, 0, []
    for index, annotation in _links(reader):
        action = annotation.get("/A")
        uri = str(action.get_object().get("/URI", "")) if action is not None else ""
        if uri:
            if re.match(r"https?://(127\.|localhost|\[::1\])", uri) or not re.match(r"(https?|mailto):", uri):
                local.append(f"p. {index + 1}: {uri}")
            external += 1
            continue
        dest = annotation.get("/Dest")
        if dest is None and action is not None:
            dest = action.get_object().get("/D")
        if not (hasattr(dest, "__len__") and len(dest) >= 2 and dest[0].idnum in page_refs):
            bad.append(f"p. {index + 1}: {dest}")
            continue
        jumps += 1
    assert not local, f"{len(local)} links to the temporary print server or to files: {local[:5]}"
    assert not bad, f"{len(bad)} links whose target is not a page of the PDF: {bad[:5]}"
    assert jumps > 100, f"only {jumps} links inside the PDF"
    assert external > 0, "no external link left (the references link the papers)"


def test_a_link_to_a_claim_lands_on_its_heading(reader, pages) -> None:
    """In the claims index each claim's ID is a link to the claim: every such link (its rectangle
    on the page holds the ID alone) lands on the page that prints the claim's heading, with the
    heading just below the point it jumps to (a link resolved to its page's start would not)."""
    page_refs = {page.indirect_reference.idnum: k for k, page in enumerate(reader.pages)}
    chapters = chapters_of(reader)
    (index_chapter,) = [c for c in chapters if c[0].startswith("Claims index")]
    ids = {c.id for c in claims.CLAIMS.values()}
    checked, wrong = set(), []
    for index, annotation in _links(reader):
        if not (index_chapter[1] <= index < index_chapter[2]) or "/Dest" not in annotation:
            continue
        x0, y0, x1, y1 = (float(v) for v in annotation["/Rect"])
        label = " ".join(r[0] for r in pages[index]["runs"]
                         if x0 - 1 <= r[1] <= x1 and y0 - 1 <= r[2] <= y1 + 1).strip()
        if label not in ids:
            continue
        dest = annotation["/Dest"]
        target = page_refs[dest[0].idnum]
        top = float(dest[3]) if isinstance(dest[3], (int, float)) else pages[target]["height"]   # null: the page's top
        heading = [r for r in pages[target]["runs"]
                   if re.match(rf"{label}\b", r[0].strip()) and top - 100 <= r[2] <= top + 2]
        checked.add(label)
        if not heading:
            wrong.append(f"{label}: p. {index + 1} -> p. {target + 1} at {top:.0f} pt: {pages[target]['text'][:60]!r}")
    assert len(checked) >= len(ids) // 2, f"only {len(checked)} claim IDs found as links in the claims index"
    assert not wrong, f"links to a claim that do not land on its heading: {wrong[:5]}"


def test_every_page_but_the_title_prints_its_number(reader, pages) -> None:
    unnumbered = [k + 1 for k, p in enumerate(pages[1:], start=1)
                  if not re.search(rf"(^|\s){k + 1}$", p["text"])]
    assert not unnumbered, f"pages without their number at the foot: {unnumbered[:10]}"
    assert list(reader.page_labels) == [str(k + 1) for k in range(len(pages))]


def test_a_bookmark_per_claim_under_its_chapter(reader, pages) -> None:
    """Under each chapter's bookmark, one per claim of the catalogue (``L1 · …``), landing on a page
    of that chapter that prints the claim's ID."""
    chapters = chapters_of(reader)
    toc = make_pdf.toc_pages()
    assert len(chapters) == len(toc)
    missing, astray = [], []
    for chapter in claims.CHAPTERS.values():
        # a claim's bookmark sits under the page that records it: its chapter's first page, or a
        # later page of the chapter (chapter 6's Gemma 3 claims, 06c)
        for claim in (c for c in claims.CLAIMS.values() if c.chapter == chapter.number):
            if f"{claim.page}.html" not in toc:
                continue
            title, first, end, children = chapters[toc.index(f"{claim.page}.html")]
            hits = [child for child in children if re.match(rf"({NUMBER})?{claim.id}\b", child.title)]
            if not hits:
                missing.append(f"{claim.id} (under {title!r})")
            for child in hits:
                target = reader.get_destination_page_number(child)
                if not (first <= target < end and re.search(rf"\b{claim.id}\b", pages[target]["text"])):
                    astray.append(f"{claim.id}: bookmark to p. {target + 1}, outside its chapter or not printing it")
    assert not missing, f"claims without a bookmark under their chapter: {missing}"
    assert not astray, astray


def test_every_chapter_prints_at_one_scale(reader, pages) -> None:
    """Each part's title (the largest text on its first page) has one size across the book, and
    the body text of every chapter is the stylesheet's 12 pt: a page Chromium shrinks to fit a wide
    output prints both smaller (67–74 % before the fix). The body size is the larger of a chapter's
    two most frequent sizes: evidence tables print at 9.8 pt, and chapter 8, mostly tables, has
    more table text than prose; a shrunk page moves both below 12 pt."""
    from collections import Counter

    chapters = chapters_of(reader)
    titles = {c[0]: round(max(r[3] for r in pages[c[1]]["runs"]), 1) for c in chapters}
    assert len(set(titles.values())) == 1, f"chapter titles at different sizes (pt): {titles}"
    body = {}
    for title, first, end, _ in chapters:
        sizes = Counter(round(r[3], 1) for p in pages[first:end] for r in p["runs"]
                        for _ in range(len(r[0])) if "Mono" not in r[4])
        body[title] = max(size for size, _ in sizes.most_common(2))
    small = {t: s for t, s in body.items() if s < 11.5 and "Claims index" not in t}
    assert not small, f"chapters whose body text prints below 12 pt (a shrunk page): {small}"


def test_no_code_runs_past_the_margin(pages) -> None:
    """A monospaced run ends at x + characters × 0.602 em (DejaVu Sans Mono's advance); it must end
    inside the page's right margin (a cut line was printed past the margin and clipped)."""
    right_margin = 14 / 25.4 * 72
    cut = []
    for k, p in enumerate(pages):
        for text, x, y, size, font in p["runs"]:
            if "Mono" in font and x + len(text.rstrip()) * 0.602 * size > p["width"] - right_margin + 3:
                cut.append(f"p. {k + 1}: {text[:40]!r}")
    assert not cut, f"{len(cut)} code runs past the right margin: {cut[:5]}"


def test_no_page_is_mostly_empty(reader, pages) -> None:
    """Every page but a part's last carries text down to at least 40 % of its height (a block that
    could not break, moved whole to the next page, left most of a page empty: 80 % before). A page
    with an image counts as used (a figure's image cannot break: make_pdf caps it at half a page)."""
    chapters = chapters_of(reader)
    last = {c[2] - 1 for c in chapters} | {0}
    foot = 16 / 25.4 * 72   # the bottom margin, where the page number is
    empty = []
    for k, p in enumerate(pages):
        if k in last:
            continue
        lowest = min((y for text, x, y, size, font in p["runs"] if y > foot), default=p["height"])
        if lowest > p["height"] * 0.6 and not reader.pages[k].images:
            empty.append(f"p. {k + 1} (text ends {1 - lowest / p['height']:.0%} down)")
    assert not empty, f"near-empty pages: {empty}"


#: The PDF's size limit: 16.5 MB (19.6 MB a round later) while Chromium printed the box shadows of
#: cards, admonitions, proofs and folds as grey JPEGs (487, then 662 of them; 9.4 MB of the 16.5);
#: 8.1 MB without them, ~6.7 MB once make_pdf stores the figures indexed (lossless).
MAX_PDF_BYTES = 8_000_000


def raster_images(reader) -> list[str]:
    """Every image of the PDF that is not a figure: the book's figures are colour images drawn
    losslessly (Flate, RGB or indexed RGB); what Chromium rasterises (a box or text shadow, a
    blur filter, a backdrop filter) it stores as a grey image, as a JPEG (DCT) or with a soft mask
    (the blur's alpha)."""
    import logging

    logging.getLogger("pypdf").setLevel(logging.ERROR)
    found = []
    for number in {n for objects in reader.xref.values() for n in objects}:
        try:
            image = reader.get_object(number)
        except Exception:   # a free or compressed entry
            continue
        if not (hasattr(image, "get") and image.get("/Subtype") == "/Image"):
            continue
        space = image.get("/ColorSpace")
        space = space.get_object() if space is not None else None
        base = space[1].get_object() if isinstance(space, list) and space and space[0] == "/Indexed" else space
        components = (3 if base == "/DeviceRGB" else 1 if base == "/DeviceGray"
                      else base[1].get_object().get("/N") if isinstance(base, list) and base[0] == "/ICCBased" else None)
        filters = image.get("/Filter")
        filters = [str(f) for f in filters] if isinstance(filters, list) else [str(filters)]
        if components != 3 or "/DCTDecode" in filters or "/SMask" in image:
            found.append(f"object {number}: {image.get('/Width')}x{image.get('/Height')}, {filters}, "
                         f"{components} components{', soft mask' if '/SMask' in image else ''}")
    return found


def test_the_pdf_weighs_at_most_8_mb_and_prints_no_shadow_images(pdf: Path, reader) -> None:
    """Fails if a shadow (or a filter, a blur) prints again (print.css lost its rule, or a theme's
    `!important` shadow beats it: 662 grey JPEGs, 19.6 MB), or if the figures stop being stored
    compactly (make_pdf's indexed figures) or the PDF otherwise grows past 8 MB."""
    rasters = raster_images(reader)
    assert not rasters, f"{len(rasters)} rasterised images that are not figures (shadows?): {rasters[:5]}"
    size = pdf.stat().st_size
    assert size <= MAX_PDF_BYTES, f"the PDF weighs {size / 1e6:.1f} MB (at most {MAX_PDF_BYTES / 1e6:.0f} MB)"


#: The stylesheet's body text (test_every_chapter_prints_at_one_scale holds every chapter to it);
#: the book's headings print at 21 pt (h3) and larger, a card's title at 12.6 pt.
BODY_PT = 12.0


def split_headings(pages: list[dict]) -> list[str]:
    """Headings printed with nothing under them on their page (their section starts on the next):
    a heading is a line of text (DejaVu Sans, not monospaced, not MathJax's fonts: a display's
    large glyphs are no heading) at 1.5 times the body size or more; under its lowest line and
    above the bottom margin, the page must print some text or an image."""
    foot = 16 / 25.4 * 72 + 4   # the bottom margin, where the page number is
    found = []
    for k, p in enumerate(pages):
        runs = [r for r in p["runs"] if r[2] > foot]
        headings = [r for r in runs if r[3] >= 1.5 * BODY_PT and "DejaVuSans" in r[4] and "Mono" not in r[4]]
        if not headings:
            continue
        lowest = min(headings, key=lambda r: r[2])
        line = lowest[2] - lowest[3] / 2   # a subscript in the heading stays above this
        below = [r for r in runs if r[2] < line] + [top for bottom, top in p.get("images", []) if foot < top < line]
        if not below:
            text = " ".join(r[0] for r in headings if abs(r[2] - lowest[2]) < 30)
            found.append(f"p. {k + 1}: {text.strip()[:60]!r}")
    return found


def test_no_heading_is_split_from_its_section(pages) -> None:
    """Three section headings printed at a page's foot with their section on the next page (Q5
    p. 36/37, C9 p. 146/147, "L4 on real activations" p. 216/217; "Derivation" of chapter 4 on a
    later print): a heading keeps its next block (print.css, make_pdf's KEEP_WITH_NEXT) and one
    measured at a page's foot in the printed part starts the next page (make_pdf's BREAK_BEFORE).
    Fails if either mechanism is lost and a heading lands at a page's foot."""
    split = split_headings(pages)
    assert not split, f"{len(split)} headings at the foot of a page: {split}"


def test_split_heading_detector_finds_a_heading_at_the_foot() -> None:
    """The detector itself: a page whose lowest text is a heading is reported; one with body text
    or a figure under the heading is not, nor a page whose lowest text is a display's large
    glyphs (MathJax's fonts) or a heading's subscript."""
    heading = ("Derivation", 50, 80, 21.0, "/AAAAAA+DejaVuSans-Bold")
    body = [("body text " * 5, 50, y, 12.0, "/AAAAAA+DejaVuSans") for y in (700, 680, 660, 640)]
    page = {"height": 842, "width": 595}
    assert split_headings([page | {"runs": body + [heading]}])
    assert split_headings([page | {"runs": body + [heading, ("k", 150, 75, 15.0, "/AAAAAA+DejaVuSans")]}])
    assert not split_headings([page | {"runs": body + [heading, ("more body", 50, 60, 12.0, "/AAAAAA+DejaVuSans")]}])
    assert not split_headings([page | {"runs": body + [heading], "images": [(50, 64)]}])
    assert not split_headings([page | {"runs": body + [("Σ", 50, 80, 25.0, "/BAAAAA+MJXZERO")]}])


def test_the_printed_claims_index_names_no_fold(text: str) -> None:
    """The folds are not printed: the printed index sends the reader to each claim's section.
    Fails if the screen's phrase ("open Why …") prints (claims.css's print rule for
    .screen-only / .print-only lost) or the printed phrase is missing."""
    text = text.replace("\u2019", "'")   # the typographic apostrophe the site prints
    assert "open Why" not in text and "open *Why*" not in text
    assert "each claim's section (its ID) gives the reason" in text


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
