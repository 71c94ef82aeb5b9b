"""The themes' stylesheets lose only rules no page can use (book/_ext/lean_site.py, purge_css).

A purge that dropped a rule a page needs would change the site's look without failing a build;
these cases are the selectors the themes' CSS holds, each with the decision a correct purge makes.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "book" / "_ext"))
import lean_site  # noqa: E402

USED = {"bd-article", "math", "eqno", "highlight", "k", "bd-header", "toc", "bs-"}


def used(name: str) -> bool:
    return name in USED or name.startswith("bs-")


def purge(css: str) -> str:
    return lean_site.purge_css(css, used)


def test_a_rule_naming_an_unused_class_goes_and_a_used_one_stays():
    assert purge(".bd-article{a:1}.gone{b:2}") == ".bd-article{a:1}"


def test_only_the_unmatchable_selectors_of_a_list_go():
    # fails if the purge drops a whole rule for one unused selector, or keeps the unused one
    assert purge(".math,.gone,div.eqno .gone2,.highlight .k{c:3}") == ".math,.highlight .k{c:3}"


def test_every_class_of_a_compound_selector_must_be_used():
    assert purge(".math.gone{d:4}#gone-id .math{e:5}") == ""


def test_classes_inside_not_is_where_has_need_not_be_present():
    css = ".math:not(.gone){f:6}.eqno:is(.gone,.math){g:7}:where(.gone) .toc{h:8}.toc:has(> .gone){i:9}"
    assert purge(css) == css


def test_attribute_values_and_strings_are_not_read_as_classes():
    css = '.math[href$=".gone"]{j:1}.toc::before{content:".gone{"}'
    assert purge(css) == css


def test_escaped_names_are_kept():
    css = r".sm\:gone{k:2}"
    assert purge(css) == css


def test_media_blocks_are_purged_inside_and_dropped_when_empty():
    css = "@media (max-width:600px){.math{l:3}.gone{m:4}}@media print{.gone{n:5}}"
    assert purge(css) == "@media (max-width:600px){.math{l:3}}"


def test_other_at_rules_and_element_selectors_stay_whole():
    css = ("@font-face{font-family:x;src:url(a.woff)}@keyframes spin{from{o:1}to{o:2}}"
           "html[data-theme=dark] body{p:3}:root{--q:4}@charset \"utf-8\";")
    assert purge(css) == css


def test_a_prefix_a_script_completes_keeps_its_classes():
    # bootstrap.js builds bs-tooltip-auto from "bs-" and the tooltip's name
    assert purge(".bs-tooltip-auto{r:1}") == ".bs-tooltip-auto{r:1}"


def test_site_names_reads_pages_and_scripts(tmp_path: Path):
    (tmp_path / "_static").mkdir()
    (tmp_path / "page.html").write_text('<div class="bd-article shown">', encoding="utf-8")
    (tmp_path / "_static" / "x.js").write_text('el.classList.add("added-by-js"); "bs-" + name', encoding="utf-8")
    names = lean_site.site_names(tmp_path)
    assert names("shown") and names("added-by-js") and names("bs-tooltip-top")
    assert not names("never-written")
