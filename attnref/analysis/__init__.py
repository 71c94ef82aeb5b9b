"""Analysis helpers of the chapters: what the notebooks measure about the reference mechanisms.

``stats``        Monte-Carlo estimates with stated finite-sample or asymptotic bounds
``symbolic``     sympy helpers (symbol matrices, homogeneity degree, expectations, symbolic softmax)
``series``       truncated power series in a small parameter (fast, for sympy expansions)
``lowrank``      exact and numerical ranks, rank modulo row shifts, single-head fits
``logit_scale``  standardised random components, entropy, softmax Jacobian, slope bands
``underflow``    the logit gap at which a softmax weight underflows to zero
``hull``         convex hulls: 2-D hulls and separating directions, the distance to a hull in any dimension
``references``   papers' formulas transcribed as explicit loops: independent oracles
``trained``      measurements on a trained model's tensors (any model): spectra, within-row
                 variance, temperature fits, bootstrap intervals over sentences
``texts``        the sentences the trained models read (written for the book)
``depth``        chapter 7 at initialisation: relative residual of stacks, per-layer gradient
                 norms, input–output Jacobians
``decoder_measure``  what ``make measure`` stores about the trained decoder, and its drift check
"""
