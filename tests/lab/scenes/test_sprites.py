"""Sprites: per-phase layers with binary masks and premultiplied textures."""

from __future__ import annotations

import numpy as np
import pytest

from shadowtutor_lab.scenes.sprites import PHASES, SPECS, make_sprite


@pytest.mark.parametrize("name", sorted(SPECS))
def test_layers_are_binary_masks_with_premultiplied_textures(name: str) -> None:
    sprite = make_sprite(np.random.default_rng(1), name, 60)
    w, h = sprite.size
    assert h == 60 and sprite.anchor == (w / 2, 60.0)
    for layer in sprite.layers:
        assert layer.masks.shape == (PHASES, 60, w) and layer.textures.shape == (PHASES, 60, w, 3)
        assert set(np.unique(layer.masks)) == {0, 255}
        assert not layer.textures[layer.masks == 0].any()
        assert layer.textures[layer.masks > 0].mean() > 5  # textured, not black


def test_a_bicycle_carries_a_rider_on_top() -> None:
    sprite = make_sprite(np.random.default_rng(0), "bicycle", 80)
    assert [layer.class_name for layer in sprite.layers] == ["bicycle", "person"]
    assert all(SPECS[name].layers[0][0] == name for name in SPECS)


def test_individuals_differ_and_seeds_repeat() -> None:
    a = make_sprite(np.random.default_rng(5), "dog", 40).layers[0].textures
    b = make_sprite(np.random.default_rng(5), "dog", 40).layers[0].textures
    c = make_sprite(np.random.default_rng(6), "dog", 40).layers[0].textures
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def test_unknown_class() -> None:
    with pytest.raises(ValueError, match="no sprite for class 'zebra'"):
        make_sprite(np.random.default_rng(0), "zebra", 40)
