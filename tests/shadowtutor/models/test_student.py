from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from skimage import data

from shadowtutor.classes import LVS_CLASSES
from shadowtutor.models.checkpoint import CheckpointError, load_student, save_student
from shadowtutor.models.student import StudentNet, block_input_sizes, map_sizes, normalise_frame


def test_parameter_counts_match_the_paper() -> None:
    student = StudentNet(9)
    assert sum(p.numel() for p in student.parameters()) == 483_873
    state = student.state_dict()
    assert len(state) == 68
    partial = sum(state[k].numel() for k in student.trainable_keys("partial"))
    assert partial == 103_465  # 21.4 % of the network
    assert student.trainable_keys("full") == list(state)


@pytest.mark.parametrize("size", [(720, 1280), (181, 321), (64, 96)])
def test_output_has_the_input_size(size: tuple[int, int]) -> None:
    with torch.no_grad():
        out = StudentNet(5)(torch.zeros(1, 3, *size))
    assert out.shape == (1, 5, *size)


def test_authors_checkpoint_loads_and_labels_like_the_release(peer_student_path: Path) -> None:
    loaded = load_student(peer_student_path)
    assert loaded.class_names == LVS_CLASSES
    model = loaded.model.eval()
    with torch.no_grad():
        astronaut = model(normalise_frame(data.astronaut()[:, :, ::-1].copy())).argmax(1)[0].numpy()
        rocket = model(normalise_frame(data.rocket()[:, :, ::-1].copy())).argmax(1)[0].numpy()
    # README of the release: about 25 % person on astronaut(), about 99 % background on rocket()
    assert np.mean(astronaut == 0) == pytest.approx(0.25, abs=0.03)
    assert np.mean(rocket == 8) == pytest.approx(0.99, abs=0.01)


def test_project_checkpoint_round_trip(tmp_path: Path) -> None:
    student = StudentNet(3)
    path = save_student(tmp_path / "s.pt", student, ("a", "b", "background"), {"epochs": 2})
    loaded = load_student(path)
    assert loaded.class_names == ("a", "b", "background") and loaded.metadata == {"epochs": 2}
    for key, value in student.state_dict().items():
        assert torch.equal(loaded.model.state_dict()[key], value)


def test_bare_state_dict_with_other_class_count_needs_names(tmp_path: Path) -> None:
    path = tmp_path / "bare.pth"
    torch.save(StudentNet(4).state_dict(), path)
    with pytest.raises(CheckpointError, match="class_names"):
        load_student(path)
    assert load_student(path, class_names=("a", "b", "c", "background")).model.num_classes == 4


def test_bad_checkpoints_give_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="not found"):
        load_student(tmp_path / "missing.pt")
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="cannot read"):
        load_student(tmp_path / "junk.pt")
    torch.save({"conv.weight": torch.zeros(1)}, tmp_path / "other.pt")
    with pytest.raises(CheckpointError, match="out_conv3"):
        load_student(tmp_path / "other.pt")
    state = StudentNet(9).state_dict()
    del state["dec2.long_path.0.weight"]
    torch.save(state, tmp_path / "partial.pt")
    with pytest.raises(CheckpointError, match="missing"):
        load_student(tmp_path / "partial.pt")


def test_normalise_frame_rejects_wrong_shapes() -> None:
    with pytest.raises(ValueError, match="BGR"):
        normalise_frame(np.zeros((4, 4), np.uint8))
    x = normalise_frame(np.full((2, 3, 3), 100, np.uint8))
    assert x.shape == (1, 3, 2, 3) and x[0, 0, 0, 0].item() == pytest.approx(100 - 103.53)


@pytest.mark.parametrize("size", [(360, 640), (101, 67)])
def test_map_sizes_are_the_sizes_a_forward_pass_makes(size) -> None:
    student = StudentNet().eval()
    with torch.no_grad():
        x1 = student.in_conv1(torch.zeros(1, 3, *size))
        x2 = student.in_conv2(x1)
        enc1 = student.enc1(x2)
        enc2 = student.enc2(enc1)
        enc3 = student.enc3(enc2)
    made = {name: tuple(t.shape[2:]) for name, t in zip(("x1", "x2", "enc1", "enc2", "enc3"),
                                                       (x1, x2, enc1, enc2, enc3), strict=True)}
    assert map_sizes(size) == made
    assert block_input_sizes(size) == {"enc1": made["x2"], "enc2": made["enc1"], "enc3": made["enc2"],
                                       "dec1": made["enc3"], "dec2": made["enc2"], "dec3": made["enc1"]}
