"""MyST markdown helpers for the generated pages: escaping, links, badges, tables."""

from __future__ import annotations

import re

from .scan import PENDING, Book, VerdictOutput, registry

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]{}<>|$#~!])")


def escape(text: str) -> str:
    """Plain text → MyST inline text (every markdown-active ASCII character escaped)."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def inline(text: str) -> str:
    """MyST inline markdown (math allowed) made safe for one table cell: no newlines, ``|`` escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


def plain_title(title: str) -> str:
    """A MyST title with inline math as plain text for a link's title (roles take no math):
    ``$\\sqrt{d_k}$`` → ``√dₖ``."""
    text = title.replace("\\sqrt{d_k}", "√dₖ").replace("d_k", "dₖ")
    return re.sub(r"[$]", "", text)


def _role_text(text: str) -> str:
    """The title of a cross-reference role is plain text: no backticks or angle brackets."""
    return re.sub(r"[`<>]", "", " ".join(str(text).split()))


def _ref(text: str, target: str) -> str:
    return f"{{ref}}`{_role_text(text)} <{target}>`"


def _doc(text: str, notebook: str) -> str:
    return f"{{doc}}`{_role_text(text)} </{notebook}>`"


BADGE = {registry.HOLDS: "bdg-success", registry.CONDITIONS: "bdg-warning", registry.FAILS: "bdg-danger",
         registry.PREMISE_FAILS: "bdg-secondary", registry.NOT_ESTABLISHED: "bdg-dark"}


def glossary_target(verdict: str) -> str:
    """The glossary's section of a verdict label (book/glossary.md): ``glossary-premise-fails-here``."""
    return "glossary-" + "-".join(verdict.split())


def _badge(verdict: str | None, link: bool = False) -> str:
    """A verdict's badge; ``link``: the badge links to the label's definition in the glossary."""
    if verdict is None:
        return f"{{bdg-muted-line}}`{PENDING}`"
    role = BADGE.get(verdict, "bdg-muted-line")
    if link and verdict in registry.ALL_VERDICTS:
        return f"{{{role.replace('bdg-', 'bdg-ref-', 1)}}}`{verdict} <{glossary_target(verdict)}>`"
    return f"{{{role}}}`{verdict}`"


def _placed(book: Book, v: VerdictOutput) -> bool:
    """True if ``v``'s section target exists, so it can be linked without a broken reference."""
    scan = book.scan_of(v.notebook)
    return scan is not None and v.target in scan.targets


def _table(header: list[str], rows: list[list[str]], align: list[str]) -> list[str]:
    rule = {"l": ":---", "c": ":---:", "r": "---:"}
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(rule[a] for a in align) + " |"]
    lines += ["| " + " | ".join(cell or " " for cell in row) + " |" for row in rows]
    return lines


def _container(lines: list[str], css_class: str) -> list[str]:
    """Wrap generated markdown in a ``{container}`` so the book's CSS can style it."""
    return ["````{container} " + css_class, *lines, "````"]


