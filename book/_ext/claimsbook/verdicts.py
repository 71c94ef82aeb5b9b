"""The verdict box under a claim's proposition (the ``{verdict}`` directive), from the stored outputs."""

from __future__ import annotations

from pathlib import Path

from .markup import _badge, _container, _table, inline
from .scan import VerdictOutput, registry, scan_notebook

def render_verdict_box(v: VerdictOutput) -> str:
    """The verdict box under a claim's proposition: badge, reason, conditions, evidence table
    (with a "fails if" column when the checks name what they rule out), statistical levels."""
    where = f" on {registry.MODELS[v.model].short}" if v.model in registry.MODELS else ""
    # the popular claim the badge judges (under a true proposition the badge may read "does not hold")
    claim = f"*The claim:* {inline(registry.CLAIMS[v.id].statement)}" if v.id in registry.CLAIMS else ""
    head = f"{_badge(v.verdict)} **{v.id}{where}.** {' '.join(v.reason.split())}"
    if v.conditions:
        head += " *Conditions:* " + "; ".join(" ".join(c.split()) for c in v.conditions) + "."
    if claim:
        head = claim + "\n\n" + head
    with_fails_if = any(c.get("fails_if") for c in v.checks)
    rows = []
    for c in v.checks:
        row = [inline(registry.check_label(c)), inline(registry.kind_label(c)), inline(c.get("measured", "")),
               inline(c.get("held_to", "")), "✓" if c.get("passed") else "✗ **failed**"]
        rows.append(row + ([inline(c.get("fails_if") or "—")] if with_fails_if else []))
    header = ["Check", "Kind", "Measured", "Held to", "Passed"] + (["Fails if"] if with_fails_if else [])
    table = _table(header, rows, ["l", "l", "r", "l", "c"] + (["l"] if with_fails_if else []))
    sentence = registry.levels_sentence(v.checks)
    return "\n".join([head, "", *_container(table, "evidence-table")] + (["", inline(sentence)] if sentence else []))


def _verdicts_of_document(path: Path) -> dict[tuple[str, str | None], VerdictOutput]:
    """The verdict outputs stored in the notebook ``path`` (read at parse time), by (ID, model)."""
    root = path.parent
    while root != root.parent and not (root / "_toc.yml").exists():
        root = root.parent
    scan = scan_notebook(path, root)
    return {(v.id, v.model): v for v in scan.verdicts}


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
            lines = render_verdict_box(v).splitlines()
            self.state.nested_parse(StringList(lines, source=str(path)), self.content_offset, box)
            return [box]

    return VerdictDirective


