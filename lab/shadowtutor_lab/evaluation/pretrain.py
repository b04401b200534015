"""Pre-training the default student on generated scenes that the evaluation never uses
(seeds >= 1000; see :mod:`shadowtutor_lab.evaluation.pretrain_config` for the seed split).

The run is reproducible: scenes are deterministic by (preset, seed, size, frames), the
sample order and flips come from ``seed``, and torch is seeded and set to deterministic
algorithms (bit-identical results need the same torch version and thread count, which the
metadata records). Training is per frame (batch 1), as the student's BatchNorm uses the
statistics of each frame at inference too.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from shadowtutor.algorithms.loss import object_weight_map, weighted_cross_entropy
from shadowtutor.classes import LVS_CLASSES, background_index
from shadowtutor.models.checkpoint import LoadedStudent, load_student
from shadowtutor.models.student import StudentNet, normalise_frame
from shadowtutor_lab.evaluation.pretrain_config import (
    EVAL_SEED_LIMIT,
    PretrainConfig,
    PretrainScene,
    pretrain_scenes,
)

log = logging.getLogger(__name__)


def _scene_dir(work_dir: Path, scene: PretrainScene, size: tuple[int, int], frames: int) -> Path:
    from shadowtutor_lab.scenes.generator import GENERATOR_VERSION

    w, h = size
    return work_dir / f"{scene.preset}-s{scene.seed}-{w}x{h}-f{frames}-g{GENERATOR_VERSION}"


def load_scene_samples(
    work_dir: Path, config: PretrainConfig, progress: bool
) -> list[tuple[np.ndarray, np.ndarray]]:
    """Make (or reuse) every pre-training scene at every size; return all their (frame, label) pairs."""
    from shadowtutor.scene_store import Scene, SceneError
    from shadowtutor_lab.scenes.generator import make_scene

    samples: list[tuple[np.ndarray, np.ndarray]] = []
    for size, scene_id in itertools.product(config.sizes, pretrain_scenes(config)):
        directory = _scene_dir(work_dir, scene_id, size, config.frames)
        try:
            scene = Scene.open(directory)
        except SceneError:
            make_scene(scene_id.preset, config.frames, scene_id.seed, directory, size=size,
                       progress=progress, force=directory.exists())
            scene = Scene.open(directory)
        if tuple(scene.meta.class_names) != LVS_CLASSES:
            raise ValueError(f"{directory} has classes {scene.meta.class_names}, the student {LVS_CLASSES}")
        samples += [(frame, scene.label(i)) for i, frame in enumerate(scene.frames())]
    return samples


@dataclass
class PretrainResult:
    model: StudentNet
    class_names: tuple[str, ...]
    metadata: dict[str, Any]


def _initial_student(config: PretrainConfig) -> tuple[StudentNet, dict[str, Any] | None]:
    if config.init is None:
        return StudentNet(len(LVS_CLASSES)), None
    loaded: LoadedStudent = load_student(config.init)
    if loaded.class_names != LVS_CLASSES:
        raise ValueError(f"--init {config.init} has classes {loaded.class_names}, expected {LVS_CLASSES}")
    return loaded.model, {"path": str(config.init), "metadata": loaded.metadata}


def train_student(
    samples: list[tuple[np.ndarray, np.ndarray]],
    config: PretrainConfig,
    on_step: Callable[[int, int, float], None] | None = None,
) -> PretrainResult:
    """Train on ``samples`` for ``config.epochs`` epochs; Adam with a cosine learning-rate decay."""
    if not samples:
        raise ValueError("no training samples")
    torch.manual_seed(config.seed)
    rng = np.random.default_rng(config.seed)
    model, init = _initial_student(config)
    model.train()
    background = background_index(LVS_CLASSES)
    optimizer = torch.optim.Adam(model.set_trainable("full"), lr=config.learning_rate)
    total = config.epochs * len(samples)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total)
    epoch_losses: list[float] = []
    step = 0
    start = time.perf_counter()
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        for _ in range(config.epochs):
            losses = []
            for index in rng.permutation(len(samples)):
                frame, label = samples[index]
                if rng.random() < 0.5:  # horizontal flip
                    frame, label = frame[:, ::-1], np.ascontiguousarray(label[:, ::-1])
                logits = model(normalise_frame(np.ascontiguousarray(frame)))
                weight = object_weight_map(label, background)
                loss = weighted_cross_entropy(logits, torch.from_numpy(label).long(), torch.from_numpy(weight))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                scheduler.step()
                losses.append(float(loss.detach()))
                step += 1
                if on_step is not None:
                    on_step(step, total, losses[-1])
            epoch_losses.append(float(np.mean(losses)))
            log.info("epoch %d: mean loss %.4f", len(epoch_losses), epoch_losses[-1])
    finally:
        torch.use_deterministic_algorithms(deterministic)
    model.eval()
    metadata = {
        "pretrain": {
            **{k: v for k, v in dataclasses.asdict(config).items() if k != "init"},
            "sizes": [list(size) for size in config.sizes],
            "scenes": [dataclasses.asdict(s) | {"frames": config.frames} for s in pretrain_scenes(config)],
            "samples": len(samples),
            "steps": step,
            "epoch_losses": epoch_losses,
            "final_loss": epoch_losses[-1],
            "init": init,
            "seconds": time.perf_counter() - start,
            "torch": str(torch.__version__),
            "threads": torch.get_num_threads(),
            "eval_seed_limit": EVAL_SEED_LIMIT,
        }
    }
    return PretrainResult(model, LVS_CLASSES, metadata)


def pretrain(config: PretrainConfig, work_dir: Path, progress: bool = True) -> PretrainResult:
    """Make the scenes (cached in ``work_dir``) and train the student on them."""
    from shadowtutor.progress import progress_bar

    samples = load_scene_samples(work_dir, config, progress)
    bar = progress_bar(total=config.epochs * len(samples), desc="pretrain", unit="step", disable=not progress)

    def on_step(step: int, total: int, loss: float) -> None:
        bar.update(1)
        if step % 20 == 0:
            bar.set_postfix(loss=f"{loss:.3f}", refresh=False)

    try:
        return train_student(samples, config, on_step)
    finally:
        bar.close()
