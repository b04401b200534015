from __future__ import annotations

from pathlib import Path

import pytest
import torch

from shadowtutor.classes import LVS_CLASSES
from shadowtutor.models.checkpoint import load_student, save_student
from shadowtutor_lab.evaluation.pretrain import load_scene_samples, pretrain, train_student
from shadowtutor_lab.evaluation.pretrain_config import EVAL_SEED_LIMIT, PretrainConfig, pretrain_scenes

TINY = PretrainConfig(presets=("fixed-people", "moving-street"), scenes_per_preset=1, frames=4, sizes=((64, 48),),
                      epochs=2)


def test_seeds_below_the_evaluation_limit_are_refused() -> None:
    with pytest.raises(ValueError, match="reserved for evaluation"):
        PretrainConfig(seed=EVAL_SEED_LIMIT - 1)
    scenes = pretrain_scenes(PretrainConfig(presets=("a", "b"), scenes_per_preset=2, seed=1000))
    assert [(s.preset, s.seed) for s in scenes] == [("a", 1000), ("a", 1001), ("b", 1002), ("b", 1003)]


def test_pretrain_makes_a_loadable_checkpoint_with_its_provenance(tmp_path: Path) -> None:
    result = pretrain(TINY, tmp_path / "work", progress=False)
    path = save_student(tmp_path / "student.pt", result.model, result.class_names, result.metadata)
    loaded = load_student(path)
    assert loaded.class_names == LVS_CLASSES
    info = loaded.metadata["pretrain"]
    assert info["scenes"] == [{"preset": "fixed-people", "seed": 1000, "frames": 4},
                              {"preset": "moving-street", "seed": 1001, "frames": 4}]
    assert info["steps"] == 2 * 8 and len(info["epoch_losses"]) == 2 and info["final_loss"] > 0
    assert info["sizes"] == [[64, 48]] and info["init"] is None


def test_several_sizes_train_on_every_scene_at_each(tmp_path: Path) -> None:
    config = PretrainConfig(**{**TINY.__dict__, "sizes": ((64, 48), (96, 54))})
    samples = load_scene_samples(tmp_path, config, progress=False)
    shapes = [frame.shape[:2] for frame, _ in samples]
    assert shapes.count((48, 64)) == shapes.count((54, 96)) == 8
    assert all(label.shape == frame.shape[:2] for frame, label in samples)
    with pytest.raises(ValueError, match="distinct frame sizes"):
        PretrainConfig(sizes=((64, 48), (64, 48)))


def test_training_is_reproducible_and_learns(tmp_path: Path) -> None:
    samples = load_scene_samples(tmp_path, TINY, progress=False)
    first = train_student(samples, TINY)
    second = train_student(samples, TINY)
    for key, value in first.model.state_dict().items():
        assert torch.equal(value, second.model.state_dict()[key]), key
    losses = first.metadata["pretrain"]["epoch_losses"]
    assert losses[-1] < losses[0]


def test_init_starts_from_a_checkpoint(tmp_path: Path) -> None:
    samples = load_scene_samples(tmp_path, TINY, progress=False)
    base = train_student(samples, TINY)
    init = save_student(tmp_path / "init.pt", base.model, base.class_names, base.metadata)
    tuned = train_student(samples, PretrainConfig(**{**TINY.__dict__, "init": init}))
    assert tuned.metadata["pretrain"]["init"]["path"] == str(init)
    assert tuned.metadata["pretrain"]["epoch_losses"][0] < base.metadata["pretrain"]["epoch_losses"][0]


def test_pretraining_sees_only_training_photos(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Held-out photos stay unseen: evaluation scenes made with them show places the student never saw."""
    from shadowtutor_lab.scenes import photos

    loaded: set[str] = set()
    real_load = photos.load_photo

    def recording_load(name: str):  # noqa: ANN202 (the wrapped function's type)
        loaded.add(name)
        return real_load(name)

    monkeypatch.setattr(photos, "load_photo", recording_load)
    config = PretrainConfig(**{**TINY.__dict__, "presets": ("fixed-animals", "moving-people", "fixed-street"),
                               "scenes_per_preset": 2, "frames": 2})
    load_scene_samples(tmp_path, config, progress=False)
    assert loaded and loaded <= set(photos.PHOTOS)
    assert not loaded & set(photos.HELD_OUT_PHOTOS)
