"""The book's plumbing, kept apart from the attention math.

``registry``  the claims registry: chapters, claims, trained models, expected verdicts (data)
``claims``    recorded evidence and the verdicts computed from it (re-exports the registry)
``seeding``   the one seeded source of randomness (``ATTNREF_SEED``)
``plotting``  the book's figure style

``claims`` and ``registry`` need only the standard library: the book build loads them by path without torch.
"""
