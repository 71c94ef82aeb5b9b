"""The audit's report: ``report.json`` (every number) and ``report.html`` (one self-contained page:
the verdict per recheck, its checks, a figure, the model's provenance). No external asset."""

from __future__ import annotations

import html
import json
from pathlib import Path

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


def write(folder: Path, report: dict, checks: dict) -> None:
    """Write ``report.json``, ``report.md`` and ``report.html`` into ``folder`` (which exists and is empty)."""
    (folder / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n")
    (folder / "report.md").write_text(markdown(report))
    rows = []
    for cid, entry in report["rechecks"].items():
        colour = _BADGE.get(entry["verdict"], "#57606a")
        checks_html = "".join(
            f"<tr><td>{'✓' if c['passed'] else '✗'}</td><td>{html.escape(c['name'])}</td>"
            f"<td>{html.escape(c['measured'])}</td><td>{html.escape(c['held_to'])}</td>"
            f"<td>{html.escape(c['bears_on'])}</td></tr>" for c in entry["checks"])
        rows.append(f"<section id='{cid.lower()}'><h2>{cid} · {html.escape(entry['claim'])}</h2>"
                    f"<p><span class='badge' style='background:{colour}'>{html.escape(entry['verdict'])}</span></p>"
                    f"<table><thead><tr><th></th><th>check</th><th>measured</th><th>held to</th><th>bears on</th></tr></thead>"
                    f"<tbody>{checks_html}</tbody></table></section>")
    summary = "".join(f"<tr><td><a href='#{cid.lower()}'>{cid}</a></td><td>{html.escape(e['claim'])}</td>"
                      f"<td><span class='badge' style='background:{_BADGE.get(e['verdict'], '#57606a')}'>"
                      f"{html.escape(e['verdict'])}</span></td></tr>" for cid, e in report["rechecks"].items())
    m = report["measurements"]
    figures = _bar_chart(m["A1"]["share_per_block"], m["A1"]["uniform"],
                         "Attention mass on the first token per block, against the uniform share (dashed)",
                         "mass on the first token (dashed: uniform weights)")
    figures += _bar_chart(m["anisotropy"]["cos_sq_d_per_block"], 1.0,
                          "E[cos²]·d between tokens of different texts per block, against 1 for isotropic vectors (dashed)",
                          "E[cos²]·d between texts (dashed: isotropic, 1)")
    prov = report["model"]
    provenance = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(json.dumps(v) if not isinstance(v, str) else v)}</td></tr>"
                         for k, v in prov.items())
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>attnref audit: {html.escape(prov['name'])}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 60rem; margin: 1rem auto; padding: 0 1rem; line-height: 1.45; }}
table {{ border-collapse: collapse; margin: .5rem 0 1rem; display: block; overflow-x: auto; }}
th, td {{ border-bottom: 1px solid #d0d7de; padding: .25rem .5rem; text-align: left; vertical-align: top; }}
.badge {{ color: #fff; border-radius: .6rem; padding: .1rem .55rem; font-size: .9em; white-space: nowrap; }}
</style></head><body>
<h1>attnref audit: {html.escape(prov['name'])}</h1>
<p>{len(report['rechecks'])} rechecks of the book <em>attention-claims</em> on this checkpoint
({html.escape(prov['family'])} family), over {report['texts']['count']} texts. Each verdict is the book's rule applied to
the checks below; the thresholds are fixed in <code>attnref.audit.rechecks</code>; intervals are bootstrap
intervals over the texts at nominal level 95 %.</p>
<table><thead><tr><th>ID</th><th>claim</th><th>verdict</th></tr></thead><tbody>{summary}</tbody></table>
{''.join(rows)}
<h2>Figures</h2>{figures}
<h2>Provenance</h2><table><tbody>{provenance}</tbody></table>
</body></html>
"""
    (folder / "report.html").write_text(page)
