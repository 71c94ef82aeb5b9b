"""The verdict box under a claim's proposition (the ``{verdict}`` directive), from the stored outputs."""

from __future__ import annotations

import re
from pathlib import Path

from .markup import _badge, _container, _ref, _table, inline
from .scan import VerdictOutput, cached_scan_book, registry, scan_notebook


#: An equation label in a check's text (``eq-q1-hessian``, or ``(eq-q1-hessian)``: the number is
#: shown in parentheses already), shown as its number through ``{eq}``.
EQUATION_LABEL = re.compile(r"(?<![\w`<-])(?P<open>\()?(?P<label>eq-[A-Za-z0-9_]+(?:-[A-Za-z0-9_]+)*)"
                            r"(?(open)\)|)(?![\w`>])")


def with_equation_numbers(text: str, labels) -> str:
    """``eq-q1-hessian: blocks …`` → ``{eq}`eq-q1-hessian`: blocks …`` (rendered "(6): blocks …"),
    and ``(eq-q1-bias)`` → ``{eq}`eq-q1-bias``` (one pair of parentheses), for every label of a
    numbered equation in ``labels``; other text is left as it is."""
    labels = set(labels or ())
    return EQUATION_LABEL.sub(lambda m: f"{{eq}}`{m['label']}`" if m["label"] in labels else m[0], text)


#: The claims with a figure a reader can move (book/_ext/static/interactive.js draws them).
INTERACTIVE = ("C2", "C3", "C5", "L4", "H4")


def checks_summary(checks) -> str:
    """``13/13 checks ✓`` (or ``12/13 checks ✓ · 1 ✗``): the fold's title over the evidence table."""
    passed = sum(bool(c.get("passed")) for c in checks)
    failed = len(checks) - passed
    return f"{passed}/{len(checks)} checks ✓" + (f" · {failed} ✗" if failed else "")


def render_verdict_box(v: VerdictOutput, math_labels=()) -> str:
    """The verdict box under a claim's proposition: badge, reason, conditions, and the evidence
    table folded under "13/13 checks ✓" (the ✓ column first; a "fails if" column when the checks
    name what they rule out; equation labels shown as numbers), statistical levels."""
    where = f" on {registry.MODELS[v.model].short}" if v.model in registry.MODELS else ""
    # the popular claim the badge judges (under a true proposition the badge may read "does not hold")
    claim = f"*The claim:* {inline(registry.CLAIMS[v.id].statement)}" if v.id in registry.CLAIMS else ""
    head = f"{_badge(v.verdict, link=True)} **{v.id}{where}.** {' '.join(v.reason.split())}"
    if v.conditions:
        head += " *Conditions:* " + "; ".join(" ".join(c.split()) for c in v.conditions) + "."
    if claim:
        head = claim + "\n\n" + head
    with_fails_if = any(c.get("fails_if") for c in v.checks)

    def cell(text) -> str:
        return with_equation_numbers(inline(text), math_labels)

    rows = []
    for c in v.checks:
        row = ["✓" if c.get("passed") else "✗ **failed**", cell(registry.check_label(c)),
               inline(registry.kind_label(c)), cell(c.get("measured", "")), cell(c.get("held_to", ""))]
        rows.append(row + ([cell(c.get("fails_if") or "—")] if with_fails_if else []))
    # the column names that need a definition link to the glossary (roles, kinds)
    header = ["Passed", _ref("Check", "glossary-roles"), _ref("Kind", "glossary-kinds"), "Measured", "Held to"] \
        + (["Fails if"] if with_fails_if else [])
    table = _table(header, rows, ["c", "l", "l", "r", "l"] + (["l"] if with_fails_if else []))
    sentence = registry.levels_sentence(v.checks)
    failed = any(not c.get("passed") for c in v.checks)
    fold = [f":::::{{dropdown}} {checks_summary(v.checks)}", ":class-container: evidence-fold"
            + (" evidence-failed" if failed else "")] + ([":open:"] if failed else []) + [
            "", *_container(table, "evidence-table"), ":::::"]
    if sentence.startswith("*Levels:*"):
        sentence = "*" + _ref("Levels", "glossary-levels") + ":*" + sentence[len("*Levels:*"):]
    return "\n".join([head, "", *fold] + (["", inline(sentence)] if sentence else []))


def _root_of(path: Path) -> Path:
    root = path.parent
    while root != root.parent and not (root / "_toc.yml").exists():
        root = root.parent
    return root


def _verdicts_of_document(path: Path) -> dict[tuple[str, str | None], VerdictOutput]:
    """The verdict outputs stored in the notebook ``path`` (read at parse time), by (ID, model)."""
    root = _root_of(path)
    notebook = path.relative_to(root).with_suffix("").as_posix()
    scan = cached_scan_book(root).scan_of(notebook) or scan_notebook(path, root)
    return {(v.id, v.model): v for v in scan.verdicts}


def _math_labels_of_book(path: Path) -> list[str]:
    """The labels of every numbered equation in the book's notebooks (a check may cite another
    section's equation)."""
    return [label for s in cached_scan_book(_root_of(path)).scans for label in s.math_labels]


def _verdict_directive():
    """The ``{verdict}`` directive: ``ID [model]`` → the verdict box, from the stored outputs of
    the notebook being read (the recording cell itself is removed from the page)."""
    from docutils import nodes
    from docutils.statemachine import StringList
    from sphinx.util import logging
    from sphinx.util.docutils import SphinxDirective

    logger = logging.getLogger(__name__)

    class VerdictDirective(SphinxDirective):
        required_arguments = 1
        optional_arguments = 1
        has_content = False

        def run(self):
            claim_id = self.arguments[0]
            model = self.arguments[1] if len(self.arguments) > 1 else None
            path = Path(self.env.doc2path(self.env.docname))
            found = _verdicts_of_document(path) if path.suffix == ".ipynb" else {}
            v = found.get((claim_id, model))
            if v is None:
                where = f" on {model}" if model else ""
                logger.warning(f"verdict: no stored verdict for {claim_id}{where} in {path.name} "
                               "(run the notebook: make execute)", location=self.get_location())
                return []
            css = {registry.HOLDS: "holds", registry.CONDITIONS: "conditions", registry.FAILS: "fails",
                   registry.PREMISE_FAILS: "premise"}
            box = nodes.container(classes=["verdict-box", f"verdict-{css.get(v.verdict, 'open')}"])
            lines = render_verdict_box(v, _math_labels_of_book(path)).splitlines()
            self.state.nested_parse(StringList(lines, source=str(path)), self.content_offset, box)
            if model is None and claim_id in INTERACTIVE:
                # a figure the reader can move (static/interactive.js), after the verdict; empty and
                # hidden without JavaScript and on paper, where the notebook's static figure stands
                html = (f'<div class="interactive-figure" data-figure="{claim_id}" hidden></div>')
                return [box, nodes.raw("", html, format="html")]
            return [box]

    return VerdictDirective


