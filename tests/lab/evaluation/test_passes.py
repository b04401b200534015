from __future__ import annotations

from pathlib import Path

import pytest
import torch

from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.classes import LVS_CLASSES
from shadowtutor.models.checkpoint import save_student
from shadowtutor.models.student import StudentNet
from shadowtutor_lab.evaluation.passes import PASSES, ScenePass, run_passes


@pytest.fixture
def jobs(tiny_scene: Path, tmp_path: Path) -> list[ScenePass]:
    torch.manual_seed(0)
    student = save_student(tmp_path / "s.pt", StudentNet(9), LVS_CLASSES)
    return [ScenePass("tiny", tiny_scene, settings, 12, (48, 32), student, params=AlgorithmParams(max_updates=1))
            for settings in PASSES]


def test_worker_processes_give_the_in_process_results(jobs: list[ScenePass]) -> None:
    here = {job.settings: evaluation for job, evaluation in run_passes(jobs, workers=1, progress=False)}
    there = {job.settings: evaluation for job, evaluation in run_passes(jobs, workers=2, progress=False)}
    assert set(here) == set(there) == set(PASSES)
    for settings in PASSES:
        assert set(here[settings].traces) == set(settings)
        for key in settings:
            assert here[settings].traces[key].miou == there[settings].traces[key].miou
            assert here[settings].traces[key].key_frames == there[settings].traces[key].key_frames


def test_unknown_settings_are_refused(tiny_scene: Path) -> None:
    with pytest.raises(ValueError, match="unknown settings"):
        ScenePass("tiny", tiny_scene, ("p2",), 4, None, tiny_scene)
