"""The book's plumbing, kept apart from the attention math.

``claims``    the claims registry, recorded evidence and the verdicts computed from it
``seeding``   the one seeded source of randomness (``ATTNREF_SEED``)
``plotting``  the book's figure style

``claims`` needs only the standard library: the book build loads it by path without torch.
"""
