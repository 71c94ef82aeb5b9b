"""The audit's report: ``report.json`` (every number; its layout is ``report.schema.json`` beside this
module, versioned by the report's ``schema`` field), ``report.md`` and ``report.html`` (one
self-contained page, no external asset: the model's family, sizes and checkpoint hash, each recheck
as the book shows it — verdict badge, every check with what was measured, what it was held to and
what would have failed it — and, for every headline number and every check, the same number on
the book's three models beside the reader's)."""

from __future__ import annotations

import html
import json
from pathlib import Path

#: The schema of report.json (JSON Schema, draft 2020-12), shipped with the package.
SCHEMA = Path(__file__).with_name("report.schema.json")

#: The book's three models, in the order the page shows them (attnref.audit.book_models).
BOOK = (("minilm", "all-MiniLM-L6-v2"), ("smollm2", "SmolLM2-135M"), ("gemma3", "Gemma 3 270M"))

#: The headline numbers of each recheck: (recheck, label, path into "measurements").
HEADLINES = (
    ("H2", "heads with rank exactly d_k", ("H2", "certified_heads")),
    ("H2", "heads", ("H2", "heads")),
    ("H2", "median stable rank of W_Q W_Kᵀ", ("H2", "median_stable_rank")),
    ("C3", "median head's Var_j(q·k)/d_k", ("C3", "median", "estimate")),
    ("C6", "median head's CV of key norms", ("C6", "median", "estimate")),
    ("L4", "E[cos²]·d between texts, median block", ("anisotropy", "cos_sq_d", "estimate")),
    ("A2", "mean cosine between texts, median block", ("anisotropy", "mean_cos", "estimate")),
    ("A1", "largest block mass on the first token", ("A1", "share", "estimate")),
    ("A1", "uniform share of the first token", ("A1", "uniform")),
    ("C9", "keys inside their head's hull", ("C9", "interior_keys")),
    ("C9", "rows won by an interior key", ("C9", "interior_winners")),
    ("D1", "relative residual after the last block", ("D1", "stream_last", "estimate")),
    ("D1", "same, attention-only path", ("D1", "pure_last", "estimate")),
    ("D1", "late/early collapse rate, attention only", ("D1", "rate_ratio")),
    ("D1", "late/early rate without the causal mask", ("D1", "free_rate_ratio")),
)

from attnref.book import claims

_BADGE = {claims.HOLDS: "#1a7f37", claims.CONDITIONS: "#9a6700", claims.FAILS: "#cf222e",
          claims.PREMISE_FAILS: "#6e7781", claims.NOT_ESTABLISHED: "#8250df"}


def _bar_chart(values: list[float], reference: float, title: str, label: str) -> str:
    """An inline SVG bar chart of ``values`` (one bar per block) with a dashed reference line."""
    width, height, pad = 640, 220, 36
    top = max(max(values, default=0.0), reference, 1e-12) * 1.1
    bar = (width - 2 * pad) / max(len(values), 1)
    parts = [f'<svg viewBox="0 0 {width} {height}" width="100%" style="max-width:{width}px" role="img" '
             f'aria-label="{html.escape(title)}"><title>{html.escape(title)}</title>']
    for i, v in enumerate(values):
        h = (height - 2 * pad) * v / top
        parts.append(f'<rect x="{pad + i * bar + 1:.1f}" y="{height - pad - h:.1f}" width="{max(bar - 2, 1):.1f}" '
                     f'height="{h:.1f}" fill="#4c72b0"><title>block {i + 1}: {v:.3f}</title></rect>')
    y = height - pad - (height - 2 * pad) * reference / top
    parts.append(f'<line x1="{pad}" x2="{width - pad}" y1="{y:.1f}" y2="{y:.1f}" stroke="#c44e52" stroke-dasharray="5 4"/>')
    parts.append(f'<text x="{pad}" y="{height - 8}" font-size="13">block 1 … {len(values)}</text>')
    parts.append(f'<text x="{pad}" y="20" font-size="13">{html.escape(label)}</text></svg>')
    return "".join(parts)


def markdown(report: dict) -> str:
    """The verdict table and every check as Markdown (for a page of the book, or a pull request)."""
    def cell(text) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")
    m = report["model"]
    lines = [f"Model **{cell(m['name'])}** ({cell(m['family'])} family), {report['texts']['count']} texts, "
             f"{report['texts']['tokens']} tokens.", "",
             "| ID | verdict | check | measured | held to |", "| --- | --- | --- | --- | --- |"]
    for cid, entry in report["rechecks"].items():
        for i, c in enumerate(entry["checks"]):
            lines.append(f"| {cid if i == 0 else ''} | {cell(entry['verdict']) if i == 0 else ''} | {cell(c['name'])} "
                         f"| {cell(c['measured'])} | {cell(c['held_to'])} |")
    return "\n".join(lines) + "\n"


def _lookup(measurements: dict, path: tuple) -> float | int | None:
    value = measurements
    for key in path:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def headline_numbers(measurements: dict) -> dict:
    """``{recheck: {label: value or None}}``: the numbers the page sets beside the book's models."""
    out: dict = {}
    for cid, label, path in HEADLINES:
        out.setdefault(cid, {})[label] = _lookup(measurements, path)
    return out


def book_comparison() -> dict:
    """The book's three stored reports (``data/audit/<name>/report.json``), reduced to what the page
    compares: verdicts, headline numbers, every check's measured value; ``{}`` where the book's
    data are not at hand (an installed package without the repository)."""
    from attnref.audit import book_models
    out = {}
    for name, label in BOOK:
        try:
            stored = book_models.stored(name)
        except (FileNotFoundError, ValueError, OSError, json.JSONDecodeError):
            continue
        out[name] = {"label": label, "family": stored["model"]["family"],
                     "verdicts": {cid: e["verdict"] for cid, e in stored["rechecks"].items()},
                     "numbers": headline_numbers(stored["measurements"]),
                     "checks": {cid: [{"name": c["name"], "measured": c["measured"], "passed": c["passed"]}
                                      for c in e["checks"]] for cid, e in stored["rechecks"].items()}}
    return out


_TEX = ((r"\\(?:mathrm|operatorname|text|mathbf)\{([^}]*)\}", r"\1"), (r"\\cdot", "·"), (r"\\top", "ᵀ"),
        (r"\\sqrt", "√"), (r"\\(?:ldots|dots)", "…"), (r"\\leq?\b", "≤"), (r"\\geq?\b", "≥"), (r"\^2", "²"),
        (r"\\[lr]Vert", "‖"), (r"\\([a-zA-Z]+)", r"\1"), (r"[{}$]", ""))


def readable(text: str) -> str:
    """A claim's statement with its TeX made plain text (the page has no maths renderer):
    ``$\\mathrm{E}[\\cos^2] = 1/d$`` -> ``E[cos²] = 1/d``."""
    import re
    for pattern, replacement in _TEX:
        text = re.sub(pattern, replacement, text)
    return text


def _format(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, int):
        return str(value)
    return f"{value:.4g}"


def _badge(verdict: str | None) -> str:
    if verdict is None:
        return "<span class='none'>not run</span>"
    return (f"<span class='badge' style='background:{_BADGE.get(verdict, '#57606a')}'>{html.escape(verdict)}</span>")


def write(folder: Path, report: dict, checks: dict) -> None:
    """Write ``report.json``, ``report.md`` and ``report.html`` into ``folder`` (which exists and is empty)."""
    (folder / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    (folder / "report.md").write_text(markdown(report))
    (folder / "report.html").write_text(page(report))


def page(report: dict) -> str:
    """The self-contained HTML page of a report."""
    book = report.get("book_models") or {}
    names = [n for n, _ in BOOK if n in book]
    prov = report["model"]
    compute = report.get("compute") or {}
    precision = compute.get("dtype")
    half = precision in ("bfloat16", "float16")
    heads_cols = "".join(f"<th>{html.escape(book[n]['label'])}</th>" for n in names)

    summary = "".join(
        f"<tr><td><a href='#{cid.lower()}'>{cid}</a></td><td>{html.escape(readable(e['claim']))}</td><td>{_badge(e['verdict'])}</td>"
        + "".join(f"<td>{_badge(book[n]['verdicts'].get(cid))}</td>" for n in names) + "</tr>"
        for cid, e in report["rechecks"].items())

    numbers = report.get("numbers") or headline_numbers(report["measurements"])
    number_rows = []
    for cid, label, _ in HEADLINES:
        if cid not in report["rechecks"] and all(book[n]["numbers"].get(cid, {}).get(label) is None for n in names):
            continue
        mine = numbers.get(cid, {}).get(label)
        note = f" <small>({html.escape(precision)})</small>" if half and mine is not None else ""
        number_rows.append(f"<tr><td>{cid}</td><td>{html.escape(label)}</td><td><b>{_format(mine)}</b>{note}</td>"
                           + "".join(f"<td>{_format(book[n]['numbers'].get(cid, {}).get(label))}</td>" for n in names)
                           + "</tr>")

    sections = []
    for cid, entry in report["rechecks"].items():
        rows = []
        for i, c in enumerate(entry["checks"]):
            beside = ""
            for n in names:
                theirs = book[n]["checks"].get(cid) or []
                other = theirs[i] if i < len(theirs) else None
                beside += ("<td>—</td>" if other is None else
                           f"<td title='{html.escape(other['name'])}'>{'✓' if other['passed'] else '✗'} "
                           f"{html.escape(str(other['measured']))}</td>")
            rows.append(f"<tr><td>{'✓' if c['passed'] else '✗'}</td><td>{html.escape(c['name'])}"
                        f"<br><small>{html.escape(c['bears_on'])}</small></td>"
                        f"<td><b>{html.escape(str(c['measured']))}</b></td><td>{html.escape(str(c['held_to']))}</td>"
                        f"<td>{html.escape(c.get('fails_if') or '')}</td>{beside}</tr>")
        sections.append(
            f"<section id='{cid.lower()}'><h2>{cid} · {html.escape(readable(entry['claim']))}</h2>"
            f"<p>This model: {_badge(entry['verdict'])}"
            + "".join(f" &nbsp; {html.escape(book[n]['label'])}: {_badge(book[n]['verdicts'].get(cid))}" for n in names)
            + "</p><table><thead><tr><th></th><th>check</th><th>measured</th><th>held to</th>"
              f"<th>would have failed it</th>{heads_cols}</tr></thead><tbody>{''.join(rows)}</tbody></table></section>")

    m = report["measurements"]
    figures = _bar_chart(m["A1"]["share_per_block"], m["A1"]["uniform"],
                         "Attention mass on the first token per block, against the uniform share (dashed)",
                         "mass on the first token (dashed: uniform weights)")
    figures += _bar_chart(m["anisotropy"]["cos_sq_d_per_block"], 1.0,
                          "E[cos²]·d between tokens of different texts per block, against 1 for isotropic vectors (dashed)",
                          "E[cos²]·d between texts (dashed: isotropic, 1)")
    sizes = ("d", "h", "h_kv", "d_k", "layers", "intermediate_size", "d_ff", "context_length", "max_positions",
             "sliding_window", "sliding_blocks", "rope_base", "stored_dtypes", "files")
    size_rows = "".join(f"<tr><th>{k}</th><td>{html.escape(json.dumps(prov[k]) if not isinstance(prov[k], str) else prov[k])}</td></tr>"
                        for k in sizes if k in prov)
    checkpoint = report.get("checkpoint") or {}
    hashes = "".join(f"<tr><th>{html.escape(name)}</th><td><code>{h}</code></td></tr>" for name, h in prov["sha256"].items())
    rest = {k: v for k, v in prov.items() if k not in sizes and k not in ("sha256", "name")}
    other = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(json.dumps(v) if not isinstance(v, str) else v)}</td></tr>"
                    for k, v in rest.items())
    software = report.get("software", {})
    compute_line = (f"Computed in <b>{html.escape(str(precision))}</b> on <b>{html.escape(str(compute.get('device')))}</b>"
                    + (", block by block" if compute.get("layerwise") else "")
                    + (f". {html.escape(compute['note'])}." if compute.get("note") else ".")) if compute else ""
    no_book = ("" if names else "<p><em>The book's stored reports (data/audit of the book's repository) were not found: "
               "the comparison columns are left out.</em></p>")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>attnref audit: {html.escape(prov['name'])}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 72rem; margin: 1rem auto; padding: 0 1rem; line-height: 1.45; }}
table {{ border-collapse: collapse; margin: .5rem 0 1rem; display: block; overflow-x: auto; }}
th, td {{ border-bottom: 1px solid #d0d7de; padding: .25rem .5rem; text-align: left; vertical-align: top; }}
.badge {{ color: #fff; border-radius: .6rem; padding: .1rem .55rem; font-size: .9em; white-space: nowrap; }}
.none {{ color: #57606a; font-style: italic; }}
code {{ font-size: .85em; word-break: break-all; }}
</style></head><body>
<h1>attnref audit: {html.escape(prov['name'])}</h1>
<p><b>{html.escape(prov['family'])}</b> family{(' · ' + html.escape(prov['layout'])) if prov.get('layout') else ''}.
Checkpoint sha256 <code>{html.escape(checkpoint.get('sha256', next(iter(prov['sha256'].values()), '')))}</code>.
{len(report['rechecks'])} rechecks of the book <em>attention-claims</em> over {report['texts']['count']} texts
({report['texts']['tokens']} tokens). {compute_line}</p>
<p>Each verdict is the book's rule applied to the checks below; the thresholds are fixed in
<code>attnref.audit.rechecks</code> before any model is read; intervals are bootstrap intervals over the texts at
nominal level 95 %. The columns on the right are the same recheck on the book's three models, from their stored
reports (the book's default texts).</p>
{no_book}
<h2>Verdicts</h2>
<table><thead><tr><th>ID</th><th>claim</th><th>this model</th>{heads_cols}</tr></thead><tbody>{summary}</tbody></table>
<h2>Numbers beside the book's models</h2>
<table><thead><tr><th>ID</th><th>number</th><th>this model</th>{heads_cols}</tr></thead><tbody>{''.join(number_rows)}</tbody></table>
{''.join(sections)}
<h2>Figures</h2>{figures}
<h2>Model</h2><table><tbody>{size_rows}{other}</tbody></table>
<h2>Files (sha256)</h2><table><tbody>{hashes}</tbody></table>
<p><small>attnref {html.escape(str(software.get('attnref', '')))}, torch {html.escape(str(software.get('torch', '')))},
Python {html.escape(str(software.get('python', '')))}; report.json schema {html.escape(str(report.get('schema', '1')))}.</small></p>
</body></html>
"""
