"""Pages generated at build time: the claims index, the headline verdicts, the execution report.

Nothing on these pages is typed by hand. At every build the extension reads

* the claims registry (:data:`attnref.book.claims.CLAIMS`, :data:`attnref.book.claims.CHAPTERS`),
* the committed, executed notebooks: every output whose metadata carries
  ``attnref_verdict`` (written by ``claims.record`` and, in chapter 6, ``claims.recheck``),
  and the section targets ``(claim-<id>)=`` / ``(real-<id>)=`` and ``:label: <id>`` of the
  ``prf:proposition`` blocks in their markdown,
* ``book/_data/report.json`` (written by ``make bench``) for the execution report,

and replaces a placeholder block in a page's source with the generated MyST markdown
(on ``source-read``, so the text is parsed like any other page):

````markdown
```{claims-index}
```

```{claims-table} Q1 C3 H2 C2 L2
```

```{execution-report}
```
````

The pages that hold a placeholder are re-read on every build (``env-get-outdated``), so an
incremental build never shows a stale verdict. A claim without a verdict yet is listed as
*not yet verified* (``tests/test_claims_index.py`` fails on it); a verdict that cannot be
placed (unknown ID, a second verdict for one ID, a verdict without its section target or
proposition label) is a build warning, hence an error under ``-W``.

The scanning functions are plain Python (no Sphinx needed) and are what the tests use.

This module is the Sphinx extension and its public face; the work is done by the package
``claimsbook`` beside it, one module per job (scan, markup, index, verdicts, report, pages, site).
"""

from __future__ import annotations

import sys
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:   # loaded by path (the tests)
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from claimsbook.index import (RECHECK_CHAPTER, _check_text, _claim_row, _counts, _model_cell,  # noqa: E402,F401
                              _why, render_headline, render_index, render_rechecks)
from claimsbook.markup import (BADGE, _badge, glossary_target, _container, _doc, _placed, _ref, _role_text,  # noqa: E402,F401
                               _table, escape, inline, plain_title)
from claimsbook.report import (REPORT_PATH, _notebook_title, _seconds, _status_badge,  # noqa: E402,F401
                               load_report, render_report)
from claimsbook.scan import (LABEL_OPTION, PENDING, PROOF, PROPOSITION, SLUGS, TARGET, Book,  # noqa: E402,F401
                             NotebookScan, VerdictOutput, notebook_paths, registry, scan_book,
                             scan_notebook)
from claimsbook.site import (PLACEHOLDER, STATIC, always_reread, check_verdicts, drop_thebe,  # noqa: E402,F401
                             drop_thebe_config, setup, source_read)
from claimsbook.verdicts import (_verdict_directive, _verdicts_of_document, checks_summary,  # noqa: E402,F401
                                 render_verdict_box, with_equation_numbers)
