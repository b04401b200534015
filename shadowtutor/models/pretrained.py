"""The project's default student: pre-trained by ``shadowtutor pretrain`` on generated scenes.

The checkpoint ships inside the package (``shadowtutor/assets/student_pretrained.pt``); its
metadata says how it was made (presets, seeds, epochs, final loss). The server and the edge
agent start every session from it unless given another checkpoint.
"""

from __future__ import annotations

from pathlib import Path

from shadowtutor.models.checkpoint import CheckpointError, LoadedStudent, load_student

ASSET_NAME = "student_pretrained.pt"


def default_student_path() -> Path:
    """Path of the packaged pre-trained student (it may be absent in a source tree being built)."""
    return Path(__file__).resolve().parents[1] / "assets" / ASSET_NAME


def load_default_student() -> LoadedStudent:
    path = default_student_path()
    if not path.is_file():
        raise CheckpointError(
            f"the packaged pre-trained student is missing ({path}); make it with `shadowtutor "
            f"pretrain --out {path}` or pass a checkpoint"
        )
    return load_student(path)
