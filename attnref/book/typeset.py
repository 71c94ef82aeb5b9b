"""Typeset statements for the book's derivation cells: what a reader sees instead of a repr.

A derivation cell ends with one of these instead of a bare sympy expression, a tuple or a dict:

* :func:`equation` shows ``lhs = rhs`` with a long sum broken into lines (``aligned``), so no
  display is wider than the column of a phone (:data:`LINE_CHARS`);
* :func:`equations` shows several named results, one per line, aligned at ``=``;
* :func:`array` shows a small table of results (one row per case);
* :func:`sentence` shows a line of Markdown (a count, a conclusion).

They only display; the checks stay in the cell's recorder calls (``claims.Evidence``).
"""

from __future__ import annotations

import re

import sympy as sp

#: Most visible characters (:func:`_visible`) of a displayed line, the left-hand side included:
#: MathJax sets about 11.7 px per such character in the book (measured in Chromium: a 56-character
#: line is 653 px), so 30 make about 350 px and a display fits the 368 px column of a 400 px phone
#: screen.
LINE_CHARS = 30
#: A right-hand side keeps at least this many characters per line, however long the left side.
MIN_RHS_CHARS = 18


def _latex(expr) -> str:
    """sympy's LaTeX with ``\\ln`` for the natural logarithm, as the book writes it."""
    return sp.latex(expr, ln_notation=True)


def _visible(latex: str) -> int:
    """Rough width of ``latex`` in characters: commands count as one glyph, braces as none."""
    text = re.sub(r"\\(left|right|displaystyle|,|;|quad)", "", latex)
    text = re.sub(r"\\[A-Za-z]+", "x", text)
    return len(re.sub(r"[{}^_ ]", "", text))


def _factor_latex(factor) -> str:
    latex = _latex(factor)
    return rf"\left({latex}\right)" if isinstance(factor, sp.Add) else latex


def _pieces(term, width: int) -> list[str]:
    """A term's LaTeX, split between its factors when it is longer than ``width`` on its own."""
    latex = _latex(term)
    if _visible(latex) <= width or not isinstance(term, sp.Mul):
        return [latex]
    pieces, piece = [], ""
    for factor in term.as_ordered_factors():
        text = _factor_latex(factor)
        if piece and _visible(piece + text) > width:
            pieces.append(piece)
            piece = r"\cdot " + text
        else:
            piece = f"{piece} {text}" if piece else text
    return pieces + [piece]


def _terms(expr, width: int) -> list[str]:
    """The LaTeX pieces of the top-level terms of a sum, each term with its sign (``+``/``-``)."""
    terms = expr.as_ordered_terms() if isinstance(expr, sp.Add) else [expr]
    out = []
    for index, term in enumerate(terms):
        coefficient, _ = term.as_coeff_Mul()
        sign = "- " if coefficient.is_negative else ("+ " if index else "")
        pieces = _pieces(-term if coefficient.is_negative else term, width)
        out += [sign + pieces[0]] + pieces[1:]
    return out


def broken(expr, width: int = LINE_CHARS) -> list[str]:
    """``expr`` as LaTeX lines of at most ``width`` visible characters, broken between the terms
    of its top-level sum, and inside a term between its factors; a quotient with a long
    numerator is shown as ``1/denominator`` times its broken numerator."""
    prefix, suffix = "", ""
    numerator, denominator = sp.fraction(expr)
    if denominator != 1 and _visible(_latex(expr)) > width:
        prefix, suffix = r"\frac{1}{" + _latex(denominator) + r"} \Bigl( ", r" \Bigr)"
        expr = sp.expand(numerator)
    lines, line = [], prefix
    for piece in _terms(expr, width):
        if line.strip() and _visible(line + piece) > width:
            lines.append(line)
            line = r"\quad " + piece
        else:
            line = f"{line} {piece}" if line else piece
    return lines + [line + suffix]


def _aligned(rows: list[tuple[str, list[str]]]) -> str:
    body = []
    for lhs, lines in rows:
        body.append(f"{lhs} &= {lines[0]}")
        body += [f"&\\phantom{{=}} {line}" for line in lines[1:]]
    return r"\begin{aligned}" + r" \\ ".join(body) + r"\end{aligned}"


def _rhs_width(lhs: str, width: int) -> int:
    return max(width - _visible(lhs) - 1, MIN_RHS_CHARS)


def equation_latex(lhs: str, expr, width: int = LINE_CHARS) -> str:
    """The LaTeX of :func:`equation`."""
    return _aligned([(lhs, broken(expr, _rhs_width(lhs, width)))])


def equation(lhs: str, expr, width: int = LINE_CHARS) -> None:
    """Display ``lhs = expr`` (``lhs`` in LaTeX, ``expr`` sympy or LaTeX), long sums broken."""
    from IPython.display import Math, display

    if isinstance(expr, str):
        display(Math(f"{lhs} = {expr}"))
    else:
        display(Math(equation_latex(lhs, expr, width)))


def equations(rows: dict[str, object], width: int = LINE_CHARS) -> None:
    """Display several results ``{lhs: expr}``, one per line, aligned at ``=``."""
    from IPython.display import Math, display

    display(Math(_aligned([(lhs, [expr] if isinstance(expr, str) else broken(expr, _rhs_width(lhs, width)))
                           for lhs, expr in rows.items()])))


def sentence(markdown: str) -> None:
    """Display one line of Markdown (inline maths in ``$…$``)."""
    from IPython.display import Markdown, display

    display(Markdown(markdown))


def array(header: list[str], rows: list[list[object]]) -> None:
    """Display a small table of results as a typeset array (cells LaTeX strings or sympy)."""
    from IPython.display import Math, display

    cell = lambda value: value if isinstance(value, str) else _latex(value)
    body = " & ".join(header) + r" \\ \hline " + r" \\ ".join(" & ".join(map(cell, row)) for row in rows)
    display(Math(r"\begin{array}{l" + "c" * (len(header) - 1) + "}" + body + r"\end{array}"))
