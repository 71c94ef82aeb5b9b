"""An author–year bibliography: the list's labels read like the citations in the text.

The text cites author–year (``bibtex_reference_style = author_year``: "Vaswani et al., 2017");
sphinxcontrib-bibtex's default list style (``alpha``) labels the same entries ``[VSP+17]`` and
garbles accented names (``[VelivckovicCC+18]``). This extension registers the pybtex style
``authoryear``: the unsrt formatting, labels "Vaswani et al., 2017" / "Reimers and Gurevych,
2019" (accents decoded from LaTeX, a/b suffixes for equal labels), sorted by author, year and
title. ``_config.yml`` selects it with ``bibtex_default_style: authoryear``. Title words whose
capitals matter are protected with braces in ``references.bib`` ({Lipschitz}).

A formula in a title (Rabe and Staats, "Self-attention Does Not Need {$O(n^2)$} Memory") is
written as text, ``O(n²)``: the bibliography is not typeset by MathJax, and the page and the PDF
showed its TeX source, ``$O(n^2)$``.
"""

from __future__ import annotations

import codecs
import re
import string
from collections import Counter

import latexcodec  # noqa: F401  (registers the "ulatex" codec; a dependency of pybtex)
from pybtex.plugin import register_plugin
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle


def _last_name(person) -> str:
    name = " ".join(person.prelast_names + person.last_names)
    return codecs.decode(name, "ulatex").replace("{", "").replace("}", "")


def author_year_label(entry) -> str:
    persons = entry.persons.get("author") or entry.persons.get("editor") or []
    names = [_last_name(p) for p in persons if str(p) != "others"]
    if not names:
        who = entry.fields.get("title", entry.key)
    elif len(names) == 1 and len(persons) == 1:
        who = names[0]
    elif len(names) == 2 and len(persons) == 2:
        who = f"{names[0]} and {names[1]}"
    else:
        who = f"{names[0]} et al."
    return f"{who}, {entry.fields.get('year', 'n.d.')}"


class AuthorYearLabelStyle(BaseLabelStyle):
    def format_labels(self, sorted_entries):
        entries = list(sorted_entries)
        labels = [author_year_label(e) for e in entries]
        counts, seen = Counter(labels), Counter()
        for label in labels:
            if counts[label] > 1:
                suffix = string.ascii_lowercase[seen[label]]
                seen[label] += 1
                yield label + suffix
            else:
                yield label


_SUPERSCRIPTS = str.maketrans("0123456789+-=()nijkT", "⁰¹²³⁴⁵⁶⁷⁸⁹⁺⁻⁼⁽⁾ⁿⁱʲᵏᵀ")
_SUBSCRIPTS = str.maketrans("0123456789+-=()", "₀₁₂₃₄₅₆₇₈₉₊₋₌₍₎")
_SYMBOLS = {"log": "log", "sqrt": "√", "cdot": "·", "times": "×", "le": "≤", "leq": "≤", "ge": "≥",
            "geq": "≥", "infty": "∞", "ell": "ℓ", "alpha": "α", "beta": "β", "epsilon": "ε", "sigma": "σ",
            "to": "→", "approx": "≈", "top": "ᵀ", "mathcal": "", "mathrm": "", "operatorname": "", "text": ""}


def _script(chars: str, table: dict) -> str:
    mapped = chars.translate(table)
    if not set(mapped) & set(chars):
        return mapped
    return ("^" if table is _SUPERSCRIPTS else "_") + (chars if len(chars) == 1 else f"({chars})")


def math_as_text(title: str) -> str:
    """A title's ``$…$`` formulas as plain text: ``{$O(n^2)$}`` -> ``{O(n²)}`` (braces kept: they
    protect the case)."""
    def one(tex: str) -> str:
        tex = re.sub(r"\\([A-Za-z]+)\s*", lambda m: _SYMBOLS.get(m[1], m[1]), tex)
        tex = re.sub(r"\^\s*(?:\{([^{}]*)\}|(\w))", lambda m: _script(m[1] or m[2], _SUPERSCRIPTS), tex)
        tex = re.sub(r"_\s*(?:\{([^{}]*)\}|(\w))", lambda m: _script(m[1] or m[2], _SUBSCRIPTS), tex)
        return tex.replace("{", "").replace("}", "")
    return re.sub(r"\$([^$]*)\$", lambda m: one(m[1]), title)


class AuthorYearStyle(UnsrtStyle):
    default_label_style = "authoryear"
    default_sorting_style = "author_year_title"

    def format_entry(self, label, entry, bib_data=None):
        title = entry.fields.get("title")
        if title and "$" in title:
            entry.fields["title"] = math_as_text(title)
        return super().format_entry(label, entry, bib_data=bib_data)


register_plugin("pybtex.style.labels", "authoryear", AuthorYearLabelStyle)
register_plugin("pybtex.style.formatting", "authoryear", AuthorYearStyle)


def setup(app) -> dict:
    return {"parallel_read_safe": True, "parallel_write_safe": True}
