"""attnref.analysis.hull: the monotone-chain hull, edge normals and the separating-direction test."""

from __future__ import annotations

import math

import pytest
import torch

from attnref.analysis import hull
from conftest import randn


def tensor(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def test_square_with_inner_and_edge_points():
    points = tensor([[0, 0], [1, 0], [1, 1], [0, 1], [0.5, 0.5], [0.5, 0], [1, 0.5]])
    assert torch.equal(hull.convex_hull_2d(points), tensor([[0, 0], [1, 0], [1, 1], [0, 1]]))


def test_degenerate_inputs():
    assert torch.equal(hull.convex_hull_2d(tensor([[2, 3]])), tensor([[2, 3]]))
    assert torch.equal(hull.convex_hull_2d(tensor([[2, 3], [2, 3], [2, 3]])), tensor([[2, 3]]))
    assert torch.equal(hull.convex_hull_2d(tensor([[2, 2], [0, 0], [1, 1]])), tensor([[0, 0], [2, 2]]))


def test_hull_is_counter_clockwise_and_contains_every_point(gen):
    points = randn(gen, 60, 2)
    vertices = hull.convex_hull_2d(points)
    edges = torch.roll(vertices, -1, 0) - vertices
    turns = edges[:, 0] * torch.roll(edges, -1, 0)[:, 1] - edges[:, 1] * torch.roll(edges, -1, 0)[:, 0]
    assert (turns > 0).all()                                       # strictly convex, counter-clockwise
    gaps = hull.separation(points, vertices, hull.edge_normals_2d(vertices))
    assert (gaps <= 1e-12).all()
    # every vertex is one of the points
    assert all(((points - v).abs().sum(dim=1) == 0).any() for v in vertices)


def test_hull_matches_scipy(gen):
    spatial = pytest.importorskip("scipy.spatial")
    points = randn(gen, 40, 2)
    vertices = hull.convex_hull_2d(points)
    reference = points[torch.as_tensor(spatial.ConvexHull(points.numpy()).vertices)]
    assert {tuple(v.tolist()) for v in vertices} == {tuple(v.tolist()) for v in reference}


def test_separation_is_the_signed_distance_for_a_square():
    square = tensor([[0, 0], [2, 0], [2, 2], [0, 2]])
    normals = hull.edge_normals_2d(square)
    assert torch.allclose(normals, tensor([[0, -1], [1, 0], [0, 1], [-1, 0]]))
    gaps = hull.separation(tensor([[1, 1], [0.5, 1], [3, 1], [1, -0.25]]), square, normals)
    assert torch.allclose(gaps, tensor([-1, -0.5, 1, 0.25]))


def test_convex_combinations_are_never_separated(gen):
    vertices = randn(gen, 6, 5)
    weights = torch.softmax(randn(gen, 20, 6), dim=1)
    directions = randn(gen, 200, 5)
    directions = directions / directions.norm(dim=1, keepdim=True)
    assert (hull.separation(weights @ vertices, vertices, directions) <= 1e-12).all()
    u = directions[0]
    beyond = vertices[(vertices @ u).argmax()] + u                   # one unit past the support in u
    assert hull.separation(beyond[None], vertices, u[None]).item() == pytest.approx(1.0)


def t(*shape: int, dtype=torch.float64) -> torch.Tensor:
    return torch.ones(*shape, dtype=dtype)


def test_convex_hull_2d_bad_shapes():
    with pytest.raises(ValueError, match=r"points must have shape \(p, 2\) with p ≥ 1, got shape \(4, 3\)"):
        hull.convex_hull_2d(t(4, 3))
    with pytest.raises(ValueError, match=r"points must have shape \(p, 2\) with p ≥ 1, got shape \(0, 2\)"):
        hull.convex_hull_2d(t(0, 2))
    with pytest.raises(ValueError, match=r"points must have 2 dimensions, got shape \(4,\)"):
        hull.convex_hull_2d(t(4))


def test_convex_hull_2d_nan():
    with pytest.raises(ValueError, match=r"points contains NaN \(shape \(2, 2\)\)"):
        hull.convex_hull_2d(tensor([[0, 0], [math.nan, 1]]))


def test_edge_normals_2d_needs_a_polygon():
    with pytest.raises(ValueError, match=r"hull must be a polygon of shape \(h, 2\) with h ≥ 3 vertices, got shape \(2, 2\)"):
        hull.edge_normals_2d(tensor([[0, 0], [1, 0]]))
    with pytest.raises(ValueError, match=r"hull of shape \(3, 2\) has repeated consecutive vertices"):
        hull.edge_normals_2d(tensor([[0, 0], [0, 0], [1, 1]]))


def test_separation_width_mismatch():
    with pytest.raises(ValueError, match=r"points has shape \(3, 2\) and vertices has shape \(4, 3\)"):
        hull.separation(t(3, 2), t(4, 3), tensor([[1, 0]]))
    with pytest.raises(ValueError, match=r"points has shape \(3, 2\) and directions has shape \(1, 3\)"):
        hull.separation(t(3, 2), t(4, 2), tensor([[1, 0, 0]]))


def test_separation_needs_unit_directions():
    with pytest.raises(ValueError, match=r"directions of shape \(1, 2\) must be unit rows"):
        hull.separation(t(3, 2), t(4, 2), tensor([[2, 0]]))


@pytest.mark.parametrize("d", [2, 3, 16])
def test_distance_to_hull_is_zero_inside(gen, d):
    vertices = randn(gen, 7, d)
    weights = torch.softmax(3 * randn(gen, 15, 7), dim=1)           # sharp and flat convex weights
    distances, found = hull.distance_to_hull(weights @ vertices, vertices)
    assert distances.max() <= 1e-9
    assert (found >= 0).all() and torch.allclose(found.sum(dim=1), torch.ones(15, dtype=torch.float64))
    assert torch.allclose(found @ vertices, weights @ vertices, atol=1e-9)   # a membership certificate


@pytest.mark.parametrize("d", [2, 3, 16])
def test_distance_to_hull_outside_is_certified_by_a_separating_direction(gen, d):
    vertices = randn(gen, 6, d)
    points = 3 * randn(gen, 15, d)
    distances, weights = hull.distance_to_hull(points, vertices)
    nearest = weights @ vertices                                     # (15, d), points of the hull
    assert torch.allclose((points - nearest).norm(dim=1), distances, atol=1e-12)
    for y, x, distance in zip(points, nearest, distances):
        if distance > 1e-9:
            u = (y - x) / distance                                   # every vertex lies ≥ distance behind
            assert hull.separation(y[None], vertices, u[None]).item() == pytest.approx(distance.item(), abs=1e-9)


def test_distance_to_hull_agrees_with_the_exact_2d_test(gen):
    vertices = randn(gen, 8, 2)
    points = 2 * randn(gen, 40, 2)
    polygon = hull.convex_hull_2d(vertices)
    outside_2d = hull.separation(points, vertices, hull.edge_normals_2d(polygon)) > 1e-9
    assert torch.equal(hull.distance_to_hull(points, vertices)[0] > 1e-9, outside_2d)


def test_distance_to_hull_of_a_segment_and_a_point():
    segment = tensor([[0, 0], [2, 0]])
    distances, weights = hull.distance_to_hull(tensor([[1, 1], [3, 0], [0.5, 0]]), segment)
    assert torch.allclose(distances, tensor([1, 1, 0]))
    assert torch.allclose(weights, tensor([[0.5, 0.5], [0, 1], [0.75, 0.25]]))
    assert hull.distance_to_hull(tensor([[3, 4]]), tensor([[0, 0]]))[0].item() == pytest.approx(5)


def test_distance_to_hull_bad_input():
    with pytest.raises(ValueError, match=r"points has shape \(3, 2\) and vertices has shape \(4, 3\)"):
        hull.distance_to_hull(t(3, 2), t(4, 3))
    with pytest.raises(ValueError, match=r"vertices must hold at least one point, got shape \(0, 2\)"):
        hull.distance_to_hull(t(3, 2), t(0, 2))


# --- interior_points (chapter 4, C9) -----------------------------------------------------------

def test_interior_points_of_a_square_with_its_centre_and_an_edge_point():
    points = tensor([[0, 0], [2, 0], [2, 2], [0, 2], [1, 1], [1, 0]])
    assert hull.interior_points(points).tolist() == [False, False, False, False, True, True]


def test_interior_points_agree_with_the_2d_hull_and_with_the_distance(gen):
    # oracle 1: in 2-D a point is a vertex exactly when the monotone chain keeps it
    points = randn(gen, 40, 2)
    vertices = hull.convex_hull_2d(points)
    is_vertex = torch.tensor([bool(((vertices - p).abs().sum(dim=1) == 0).any()) for p in points])
    assert torch.equal(hull.interior_points(points), ~is_vertex)
    # oracle 2: in 5-D, the distance to the hull of the others for every point
    cloud = randn(gen, 30, 5) * torch.linspace(0.2, 2.0, 30, dtype=torch.float64)[:, None]
    distances = torch.stack([hull.distance_to_hull(cloud[j:j + 1], torch.cat([cloud[:j], cloud[j + 1:]]))[0][0]
                             for j in range(30)])
    assert torch.equal(hull.interior_points(cloud), distances <= 1e-9 * cloud.norm(dim=1).max())


def test_interior_points_bad_directions_cannot_make_an_interior_point_a_vertex(gen):
    # a direction that does not separate falls back to the exact test; the centre stays inside
    points = tensor([[0, 0], [2, 0], [2, 2], [0, 2], [1, 1]])
    assert hull.interior_points(points, directions=-points).tolist() == [False] * 4 + [True]


def test_simplex_and_sphere_points_are_all_vertices(gen):
    simplex = randn(gen, 6, 5)                                   # d + 1 points in general position
    assert not hull.interior_points(simplex).any()
    sphere = randn(gen, 200, 3)
    sphere = sphere / sphere.norm(dim=1, keepdim=True)
    assert not hull.interior_points(sphere).any()


def test_interior_points_bad_input():
    with pytest.raises(ValueError, match="at least 2 rows"):
        hull.interior_points(tensor([[1.0, 2.0]]))
    with pytest.raises(ValueError, match="directions must have the shape of points"):
        hull.interior_points(tensor([[0, 0], [1, 1]]), directions=tensor([[1.0, 0.0]]))
