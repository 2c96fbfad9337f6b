"""The Configure screen's device grid says in words why a mesh does not fit the devices."""

from __future__ import annotations

import pytest

from workbench.widgets.device_grid import DeviceGrid


def _grid(devices: int, shape: tuple[int, int, int]) -> DeviceGrid:
    grid = DeviceGrid()
    grid.device_count, grid.shape = devices, shape
    return grid


@pytest.mark.parametrize("devices, shape, says", [
    (1, (3, 1, -1), "3×1×-1: the -1 axis cannot fill 1 device: 1 is not a multiple of 3"),
    (8, (3, -1, 1), "3×-1×1: the -1 axis cannot fill 8 devices: 8 is not a multiple of 3"),
    (8, (2, 2, 1), "2×2×1 = 4, need 8"),
    (8, (0, 1, -1), "0×1×-1: sizes must be ≥ 1 (or -1 on one axis, to fill)"),
])
def test_a_mesh_that_does_not_fit_says_why(devices, shape, says):
    grid = _grid(devices, shape)
    assert not grid.valid
    assert f"✗ {says}" in grid.render().plain
    assert "= -" not in grid.render().plain  # never a negative product


def test_a_mesh_that_fits_draws_its_devices():
    grid = _grid(8, (2, 1, 4))
    assert grid.valid
    text = grid.render().plain
    assert "✗" not in text and "[ 7]" in text
