"""The claims pages generated at build time, one module per job (the Sphinx extension is
``book/_ext/claims_index.py``, which re-exports every public name):

``scan``      read the executed notebooks: verdict outputs, section targets, proposition labels
``markup``    MyST helpers: escaping, links, badges, tables
``index``     the claims index and the headline table
``verdicts``  the verdict box under a claim (``{verdict}`` directive), evidence folded
``report``    the execution report (``book/_data/report.json``)
``pages``     what the build adds to the chapter pages and the short-answers page
``site``      the Sphinx hooks

Everything but ``site`` is plain Python (no Sphinx), which is what the tests use.
"""
