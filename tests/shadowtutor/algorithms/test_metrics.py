from __future__ import annotations

import numpy as np
import pytest

from shadowtutor.algorithms.metrics import miou


def test_hand_worked_miou() -> None:
    label = np.array([[0, 0, 1, 1]])
    pred = np.array([[0, 1, 1, 1]])
    # class 0: I=1, U=2 -> .5 ; class 1: I=2, U=3 -> 2/3 ; class 2 absent everywhere
    assert miou(pred, label, 3) == pytest.approx((0.5 + 2 / 3) / 2)


def test_hallucinated_class_counts() -> None:
    label = np.zeros((2, 2), int)
    pred = np.array([[0, 0], [0, 2]])
    assert miou(pred, label, 3) == pytest.approx((3 / 4 + 0.0) / 2)


def test_perfect_and_shape_mismatch() -> None:
    label = np.random.default_rng(0).integers(0, 5, (8, 8))
    assert miou(label, label, 5) == 1.0
    with pytest.raises(ValueError):
        miou(label[:4], label, 5)
