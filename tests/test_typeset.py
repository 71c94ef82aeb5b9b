"""attnref.book.typeset: a derivation's result as a typeset statement that fits a phone's column."""

from __future__ import annotations

import sympy as sp

from attnref.book import typeset


def _lines(latex: str) -> list[str]:
    body = latex.removeprefix(r"\begin{aligned}").removesuffix(r"\end{aligned}")
    return body.split(r" \\ ")


def test_a_long_sum_is_broken_into_lines_that_fit():
    M = sp.Matrix(3, 3, lambda i, j: sp.Symbol(f"M_{{{min(i, j) + 1}{max(i, j) + 1}}}"))
    S = sp.Matrix(3, 3, lambda i, j: sp.Symbol(f"S_{{{min(i, j) + 1}{max(i, j) + 1}}}"))
    expr = (M * S).trace()
    latex = typeset.equation_latex(r"\mathbb{E}[(q\cdot k)^2]", expr)
    lines = _lines(latex)
    assert len(lines) >= 3
    assert all(typeset._visible(line) <= typeset.LINE_CHARS + 6 for line in lines), lines
    # nothing lost: the pieces are the expression's terms, in order, with their signs
    rhs = " ".join(line.split("&=", 1)[-1].replace(r"&\phantom{=} \quad", "") for line in lines)
    assert sp.latex(expr).replace(" ", "") == rhs.replace(" ", "")


def test_negative_terms_keep_their_sign_and_a_long_quotient_is_split_in_its_numerator():
    a, b, c = sp.symbols("a b c")
    expr = sp.factor(-(a**3 * b + 2 * a * b**2 * c - 7 * a**2 * c**3 + b**4 - c**4 + a * b * c) / 3)
    lines = typeset.broken(expr, width=20)
    assert lines[0].startswith(r"\frac{1}{3} \Bigl(") and lines[-1].endswith(r"\Bigr)")
    joined = " ".join(lines)
    assert joined.count("- ") + joined.count("+ ") >= 5


def test_the_natural_logarithm_is_ln():
    assert typeset._latex(25 * sp.log(2)) == r"25 \ln{\left(2 \right)}"
