"""Tiny generated scenes (the real generator, small sizes) shared by the evaluation tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from shadowtutor_lab.scenes.generator import make_scene


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """One thread: on a shared, oversubscribed CPU two OpenMP threads can run ten times slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def tiny_scene(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """40 frames of fixed-people at 96x64 (seed 3, an evaluation seed)."""
    return make_scene("fixed-people", 40, 3, tmp_path_factory.mktemp("scenes") / "fixed-people-s3",
                      size=(96, 64), progress=False)
