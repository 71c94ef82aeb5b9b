r"""Convex hulls and separating directions, to check where attention outputs can lie.

A point :math:`y` lies in the convex hull of the points :math:`v_1, \dots, v_m` exactly when no
direction separates it from them:

.. math:: y \in \mathrm{conv}\{v_j\} \iff u \cdot y \le \max_j u \cdot v_j \ \text{for every direction } u.

:func:`separation` measures :math:`\max_u (u \cdot y - \max_j u \cdot v_j)` over given unit
directions: a positive value is a certificate that ``y`` is outside. In two dimensions the
outward edge normals of the hull (:func:`convex_hull_2d`, :func:`edge_normals_2d`) are the only
directions that need checking, so there the test is exact: the separation is the signed
distance to the nearest edge line (negative inside). In any dimension,
:func:`distance_to_hull` finds the point of the hull nearest to ``y`` (Wolfe's minimum-norm-point
algorithm, exact up to round-off after finitely many steps): its distance is 0 exactly for points
inside, and for a point outside the direction from the nearest point to ``y`` is a separating
direction whose gap (:func:`separation`) equals that distance.
"""

from __future__ import annotations

import torch

from attnref import _validate as check

Tensor = torch.Tensor


def _cross(o: Tensor, a: Tensor, b: Tensor) -> float:
    r"""z-component of :math:`(a - o) \times (b - o)`: > 0 for a counter-clockwise turn o → a → b."""
    return float((a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0]))


def convex_hull_2d(points: Tensor) -> Tensor:
    """The vertices of the convex hull of 2-D points, counter-clockwise (Andrew's monotone chain).

    Sort the points by ``(x, y)``; build the lower chain left to right and the upper chain right
    to left, popping the last vertex while it does not make a strict left turn; join the chains.
    Points on an edge (collinear) are not vertices.

    Args:
        points: ``(p, 2)``, ``p ≥ 1``.

    Returns ``(h, 2)``, starting at the lowest-leftmost point; ``h = 1`` if every point coincides,
    ``h = 2`` if they are collinear.
    """
    check.floating("points", points, exact_dim=2)
    if points.shape[1] != 2 or points.shape[0] == 0:
        raise ValueError(f"points must have shape (p, 2) with p ≥ 1, got shape {check.shape_of(points)}")
    order = sorted(range(points.shape[0]), key=lambda i: (float(points[i, 0]), float(points[i, 1])))
    ordered = [points[i] for i in order]

    def chain(sequence: list[Tensor]) -> list[Tensor]:
        vertices: list[Tensor] = []
        for p in sequence:
            while len(vertices) >= 2 and _cross(vertices[-2], vertices[-1], p) <= 0:
                vertices.pop()            # not a strict left turn: vertices[-1] is inside or on an edge
            vertices.append(p)
        return vertices

    lower = chain(ordered)
    upper = chain(ordered[::-1])
    vertices = lower[:-1] + upper[:-1]    # each chain ends where the other starts
    if not vertices:                      # every point coincides
        vertices = [ordered[0]]
    if len(vertices) == 2 and torch.equal(vertices[0], vertices[1]):
        vertices = vertices[:1]
    return torch.stack(vertices)          # (h, 2)


def edge_normals_2d(hull: Tensor) -> Tensor:
    r"""Unit outward normals of the edges of a counter-clockwise polygon, ``(h, 2)``.

    Edge ``e`` runs from ``hull[e]`` to ``hull[e + 1]`` (cyclically); for a counter-clockwise
    polygon its outward normal is the edge direction :math:`(t_x, t_y)` turned clockwise,
    :math:`(t_y, -t_x) / \lVert t \rVert`.
    """
    check.floating("hull", hull, exact_dim=2)
    if hull.shape[1] != 2 or hull.shape[0] < 3:
        raise ValueError(f"hull must be a polygon of shape (h, 2) with h ≥ 3 vertices, got shape {check.shape_of(hull)}")
    edges = torch.roll(hull, -1, dims=0) - hull              # (h, 2): hull[e + 1] - hull[e]
    lengths = edges.norm(dim=1, keepdim=True)                # (h, 1)
    if (lengths == 0).any():
        raise ValueError(f"hull of shape {check.shape_of(hull)} has repeated consecutive vertices")
    normals = torch.stack([edges[:, 1], -edges[:, 0]], dim=1)  # (h, 2): clockwise quarter turn
    return normals / lengths


def separation(points: Tensor, vertices: Tensor, directions: Tensor) -> Tensor:
    r"""For each point, the largest gap :math:`\max_u (u \cdot y - \max_j u \cdot v_j)` over the directions.

    Args:
        points: ``(p, d)``, the points :math:`y` to test.
        vertices: ``(m, d)``, the points :math:`v_j` whose hull is tested against.
        directions: ``(r, d)``, unit directions :math:`u` (rows).

    Returns ``(p,)``. A positive entry means some direction separates that point from the
    hull (it is outside). Inside the hull every entry is ≤ 0 for every choice of directions;
    with the outward edge normals of a 2-D hull the entry is exactly the signed distance to the
    nearest edge line, so ≤ 0 is also sufficient.
    """
    check.floating("points", points, exact_dim=2)
    check.floating("vertices", vertices, exact_dim=2)
    check.floating("directions", directions, exact_dim=2)
    check.same_dtype(points=points, vertices=vertices, directions=directions)
    check.dim_equal("points and vertices must have the same width d", "points", points, 1, "vertices", vertices, 1)
    check.dim_equal("points and directions must have the same width d", "points", points, 1,
                    "directions", directions, 1)
    norms = directions.norm(dim=1)
    if ((norms - 1).abs() > 1e-9).any():
        raise ValueError(f"directions of shape {check.shape_of(directions)} must be unit rows")
    point_heights = points @ directions.T                    # (p, d) @ (d, r) -> (p, r): u · y
    support = (vertices @ directions.T).amax(dim=0)          # (m, d) @ (d, r) -> (m, r) -> (r,): max_j u · v_j
    gaps = point_heights - support                           # (p, r)
    return gaps.amax(dim=1)                                  # (p,)


def _min_norm_point(points: Tensor, tolerance: float) -> tuple[Tensor, Tensor]:
    r"""Wolfe's algorithm: the point of :math:`\mathrm{conv}\{p_1, \dots, p_m\}` nearest to the origin.

    Keeps a corral ``S`` of points and convex weights ``λ`` on it. Major step: if no point lies
    further than round-off on the near side of the plane through ``x = Σ λ_k p_k`` normal to
    ``x`` (:math:`\min_j x \cdot p_j \ge x \cdot x - ε`), ``x`` is optimal; otherwise the most
    violating point joins ``S``. Minor step: the nearest point of the affine hull of ``S``
    (weights ``μ`` with :math:`\sum μ = 1`, from the bordered system
    :math:`[P_S P_S^\top, 1; 1^\top, 0]`); if some ``μ_k ≤ 0``, move from ``λ`` toward ``μ`` until
    the first weight reaches 0, drop it, and repeat.

    Args:
        points: ``(m, d)``, the rows :math:`p_j`.

    Returns the nearest point ``(d,)`` and its convex weights ``(m,)``.
    """
    m = points.shape[0]
    scale = float(points.norm(dim=1).max()) ** 2 or 1.0
    corral = [int(points.norm(dim=1).argmin())]
    weights = points.new_ones(1)
    x = points[corral[0]]
    for _ in range(50 * (m + points.shape[1]) + 100):
        heights = points @ x                                  # (m,): x · p_j
        j = int(heights.argmin())
        if heights[j] >= x @ x - tolerance * scale or j in corral:
            break
        corral.append(j)
        weights = torch.cat([weights, weights.new_zeros(1)])
        while True:
            P = points[corral]                                # (s, d)
            s = len(corral)
            system = points.new_zeros(s + 1, s + 1)
            system[:s, :s] = P @ P.T                          # Gram matrix of the corral
            system[:s, s] = 1
            system[s, :s] = 1
            rhs = points.new_zeros(s + 1)
            rhs[s] = 1
            try:
                mu = torch.linalg.solve(system, rhs)[:s]          # nearest point of the affine hull
            except RuntimeError:                                  # affinely dependent corral
                mu = (torch.linalg.pinv(system) @ rhs)[:s]
            if (mu > tolerance).all():
                weights = mu
                break
            shrinking = mu <= tolerance
            steps = weights[shrinking] / (weights[shrinking] - mu[shrinking])
            theta = float(steps.min().clamp(0, 1))
            weights = weights + theta * (mu - weights)
            keep = weights > tolerance
            keep[int(torch.where(shrinking)[0][int(steps.argmin())])] = False    # the weight that hit 0
            corral = [k for k, kept in zip(corral, keep.tolist()) if kept]
            weights = weights[keep]
            weights = weights / weights.sum()
        x = weights @ points[corral]
    full = points.new_zeros(m)
    full[corral] = weights
    return x, full


def distance_to_hull(points: Tensor, vertices: Tensor, tolerance: float = 1e-12) -> tuple[Tensor, Tensor]:
    r"""Euclidean distance from each point to :math:`\mathrm{conv}\{v_1, \dots, v_m\}`, in any dimension.

    For each point ``y`` the nearest point of the hull is found by Wolfe's minimum-norm-point
    algorithm applied to :math:`\{v_j - y\}` (:func:`_min_norm_point`). Inside the hull the distance is
    0 up to round-off; outside, :math:`u = (y - x^*) / \lVert y - x^* \rVert` separates ``y`` from
    every vertex by exactly the distance (``separation(y, vertices, u) == distance``).

    Args:
        points: ``(p, d)``, the points ``y``.
        vertices: ``(m, d)``, the points :math:`v_j` (not necessarily the hull's vertices).
        tolerance: relative round-off tolerance of the optimality test.

    Returns the distances ``(p,)`` and the convex weights of the nearest points ``(p, m)``
    (rows ≥ 0, summing to 1: a certificate of membership when the distance is 0).
    """
    check.floating("points", points, exact_dim=2)
    check.floating("vertices", vertices, exact_dim=2)
    check.same_dtype(points=points, vertices=vertices)
    check.dim_equal("points and vertices must have the same width d", "points", points, 1, "vertices", vertices, 1)
    if vertices.shape[0] == 0:
        raise ValueError(f"vertices must hold at least one point, got shape {check.shape_of(vertices)}")
    distances, weights = [], []
    for y in points:
        nearest, w = _min_norm_point(vertices - y, tolerance)   # nearest point of the hull, minus y
        distances.append(nearest.norm())
        weights.append(w)
    if not distances:
        return points.new_zeros(0), points.new_zeros(0, vertices.shape[0])
    return torch.stack(distances), torch.stack(weights)


def interior_points(points: Tensor, directions: Tensor | None = None, tolerance: float = 1e-9) -> Tensor:
    r"""Which of the points lie in the convex hull of the *others*, exactly: a bool tensor ``(m,)``.

    A point :math:`p_j` with a direction :math:`u_j` such that :math:`u_j \cdot p_j > \max_{l \ne j} u_j \cdot p_l`
    is a vertex: :math:`u_j` separates it strictly from the others (a query along :math:`u_j` gives it
    the largest dot-product score). ``directions`` (row ``j`` for point ``j``, default the points
    themselves, which certify most points of a high-dimensional cloud at no cost) are tried first;
    every point they do not certify is decided by :func:`distance_to_hull` (Wolfe's algorithm):
    interior when its distance to the hull of the others is at most ``tolerance`` times the largest
    norm. Both decisions are exact up to round-off; no point is left undecided.

    Args:
        points: ``(m, d)``, ``m ≥ 2``.
        directions: ``(m, d)`` candidate separating directions, or ``None``.
    """
    check.floating("points", points, exact_dim=2)
    m = points.shape[0]
    if m < 2:
        raise ValueError(f"points must hold at least 2 rows, got shape {check.shape_of(points)}")
    if directions is None:
        directions = points
    check.floating("directions", directions, exact_dim=2)
    if directions.shape != points.shape:
        raise ValueError(f"directions must have the shape of points, got {check.shape_of(directions)} "
                         f"and {check.shape_of(points)}")
    heights = directions @ points.T                             # (m, d) @ (d, m) -> (m, m): u_j · p_l
    own = heights.diagonal()                                    # u_j · p_j: (m,)
    others = heights.masked_fill(torch.eye(m, dtype=torch.bool, device=points.device), float("-inf"))
    certified = own > others.amax(dim=1)                        # strictly separated: vertices
    interior = torch.zeros(m, dtype=torch.bool, device=points.device)
    scale = float(points.norm(dim=1).max())
    for j in torch.nonzero(~certified).flatten().tolist():
        rest = torch.cat([points[:j], points[j + 1:]])          # (m − 1, d)
        distance, _ = distance_to_hull(points[j:j + 1], rest)
        interior[j] = bool(distance[0] <= tolerance * scale)
    return interior


#: The reason a C9 recheck gives when no key lies inside its head's hull (premise fails here).
C9_NOTHING_INSIDE = "no key inside its head's hull: C9 costs nothing on this text"


def record_c9(evidence, interior_keys: int, interior_winners: int, *, where: str) -> str:
    r"""C9 on a trained model, defined once: chapters 6, 6b, 6c and ``attnref audit`` all record it here.

    C9 says a key strictly inside the convex hull of its head's other keys never receives the
    largest score. On a trained model the recheck counts those keys (``interior_keys``, over every
    head of the text ``where`` describes) and how many of them some query of the text gives the
    largest score (``interior_winners``):

    * 0 interior keys → the premise (an interior key) does not occur: one *premise fails* check,
      and the verdict is *premise fails here* (C9 costs nothing on this text);
    * ≥ 1 → the claim as stated: none of them wins (``interior_winners == 0``) → *holds*; one that
      wins fails the check (the hull test, the key extraction or the scores are wrong).

    A check over the empty set of interior keys is not recorded: it would vote without being able
    to fail. What else a chapter measures (every key selectable, the margin of a non-interior key)
    it records beside this as supporting or demonstration checks. ``evidence`` is a recheck's
    :class:`attnref.book.claims.Evidence` (``model=…``). Returns :data:`C9_NOTHING_INSIDE` or a
    sentence on the interior keys, for the verdict's reason.
    """
    from attnref.book import claims
    counts = {"interior_keys": interior_keys, "interior_winners": interior_winners}
    for name, value in counts.items():
        try:
            number = int(value) if not isinstance(value, (bool, str)) else None
        except (TypeError, ValueError, RuntimeError):
            number = None
        if number is None or number < 0 or float(value) != number:
            raise ValueError(f"{name} must be a count (an integer ≥ 0), got {value!r}")
        counts[name] = number
    interior, winners = counts["interior_keys"], counts["interior_winners"]
    if getattr(evidence, "model", None) is None:
        raise ValueError("record_c9 records a recheck on a trained model: evidence needs model=…")
    if interior == 0:
        if winners:
            raise ValueError(f"interior_winners = {winners} with interior_keys = 0: a winner must be an interior key")
        evidence.premise_fails.exact(f"keys strictly inside the hull of their head's other keys ({where})",
                                     interior, 0, kind=claims.REAL_MODEL,
                                     fails_if="a key inside its head's hull: C9 has a key to act on here")
        return C9_NOTHING_INSIDE
    evidence.exact(f"keys strictly inside their head's hull ({where}: {interior}) given the largest score by a query",
                   winners, 0, kind=claims.REAL_MODEL,
                   fails_if="an interior key winning a row: the hull test, the key extraction or the scores are wrong")
    return (f"{interior} key{'s' if interior > 1 else ''} inside {'their' if interior > 1 else 'its'} head's hull, "
            f"{winners} given the largest score by a query")
