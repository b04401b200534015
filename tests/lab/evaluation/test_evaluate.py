from __future__ import annotations

from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor_lab.evaluation.evaluate import sweep_params


def test_sweep_params_set_the_threshold_setting_and_min_stride_only() -> None:
    base = AlgorithmParams(threshold=0.7, max_updates=4, threshold_policy="auto")
    fixed = sweep_params(base, 0.5, 16)
    assert (fixed.threshold, fixed.threshold_policy, fixed.min_stride, fixed.max_updates) == (0.5, "fixed", 16, 4)
    auto = sweep_params(base, "auto", 8)
    # auto starts where --threshold auto does: the default THRESHOLD
    assert (auto.threshold, auto.threshold_policy, auto.min_stride) == (AlgorithmParams().threshold, "auto", 8)
