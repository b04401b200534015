"""The Mask R-CNN teacher with a randomly initialised model: real weights cannot be downloaded
here, so the tests make their own state dict and drive the real loading and forward code."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from shadowtutor.classes import LVS_CLASSES
from shadowtutor.teachers import TeacherError, build_teacher
from shadowtutor.teachers.class_maps import COCO_CATEGORY_NAMES, COCO_CLASSES, checked_class_lut
from shadowtutor.teachers.instances import kept_boxes, paint_instances
from shadowtutor.teachers.maskrcnn import MaskRCNNTeacher, load_maskrcnn_state_dict

TORCHVISION_FILE = "maskrcnn_resnet50_fpn_coco-bf2d0c1e.pth"
SMALL = {"min_size": 96, "max_size": 160, "device": "cpu"}  # keep the forward pass fast on CPU


@pytest.fixture(scope="module")
def random_weights(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from torchvision.models.detection import maskrcnn_resnet50_fpn

    torch.manual_seed(0)
    model = maskrcnn_resnet50_fpn(weights=None, weights_backbone=None, num_classes=91)
    path = tmp_path_factory.mktemp("maskrcnn") / "random_maskrcnn.pth"
    torch.save(model.state_dict(), path)
    return path


@pytest.fixture
def frames() -> list[np.ndarray]:
    rng = np.random.default_rng(1)
    return [rng.integers(0, 256, (96, 128, 3), dtype=np.uint8) for _ in range(2)]


def test_local_weights_and_end_to_end_forward(random_weights: Path, frames: list[np.ndarray]) -> None:
    teacher = build_teacher("maskrcnn", weights_path=str(random_weights), **SMALL)
    assert isinstance(teacher, MaskRCNNTeacher)
    reference = torch.load(random_weights, weights_only=True)
    loaded = teacher._model.state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in reference.items())
    labels = teacher.label(frames[0])
    assert labels.shape == (96, 128) and labels.dtype == np.uint8
    assert labels.max() < len(LVS_CLASSES)
    batch = teacher.label_batch(frames)
    assert (batch[0] == labels).all() and batch[1].shape == (96, 128)
    info = teacher.describe()
    assert info["backend"] == "maskrcnn" and info["device"] == "cpu"
    assert info["class_names"] == list(LVS_CLASSES) and info["weights"] == str(random_weights)


@pytest.mark.slow
def test_forward_paints_the_detectors_instances(random_weights: Path, frames: list[np.ndarray]) -> None:
    # The random model's detections are arbitrary COCO classes: take the class of its best real
    # detection as the task's one class, so the painted map is not all background.
    frame = frames[0]
    probe = MaskRCNNTeacher(weights_path=random_weights, **SMALL)
    rgb = torch.from_numpy(frame[:, :, ::-1].copy()).permute(2, 0, 1).float() / 255
    with torch.inference_mode():
        raw = probe._model([rgb])[0]
    real = [i for i, c in enumerate(raw["labels"].tolist()) if COCO_CATEGORY_NAMES[c] != "N/A"]
    assert real and raw["scores"][real[0]] >= 0.5
    names = (COCO_CATEGORY_NAMES[int(raw["labels"][real[0]])], "background")
    teacher = MaskRCNNTeacher(class_names=names, weights_path=random_weights, **SMALL)
    labels = teacher.label(frame)
    lut = checked_class_lut(COCO_CATEGORY_NAMES, names, "COCO")
    expected = paint_instances(raw["masks"].numpy(), raw["scores"].numpy(), raw["labels"].numpy(), lut, 1, 2)
    assert (labels == expected).all() and (labels == 0).any()
    # the boxes of every detection above the threshold, of any class; class painting order as an option
    by_class = MaskRCNNTeacher(class_names=names, weights_path=random_weights, paint_order="class", **SMALL)
    (taught,) = by_class.teach_batch([frame])
    keep = raw["scores"].numpy() >= 0.5
    np.testing.assert_array_equal(taught.boxes, raw["boxes"].numpy()[keep])
    class_order = paint_instances(raw["masks"].numpy(), raw["scores"].numpy(), raw["labels"].numpy(), lut, 1, 2,
                                  order="class")
    assert (taught.labels == class_order).all() and by_class.describe()["paint_order"] == "class"


def test_torchvision_reference_checkpoint_and_bad_files(random_weights: Path, tmp_path: Path) -> None:
    wrapped = tmp_path / "checkpoint.pth"
    torch.save({"model": torch.load(random_weights, weights_only=True), "epoch": 25}, wrapped)
    state_dict, source = load_maskrcnn_state_dict(wrapped)
    assert "roi_heads.mask_predictor.mask_fcn_logits.weight" in state_dict and source == str(wrapped)
    with pytest.raises(TeacherError, match="not found"):
        load_maskrcnn_state_dict(tmp_path / "absent.pth")
    (tmp_path / "garbage.pth").write_bytes(b"not a checkpoint")
    with pytest.raises(TeacherError, match="cannot read"):
        load_maskrcnn_state_dict(tmp_path / "garbage.pth")
    other = tmp_path / "other.pth"
    torch.save(torch.nn.Conv2d(3, 4, 1).state_dict(), other)
    with pytest.raises(TeacherError, match="do not fit torchvision's Mask R-CNN"):
        MaskRCNNTeacher(weights_path=other, **SMALL)


def test_download_cache_under_torch_home(random_weights: Path, tmp_path: Path, monkeypatch) -> None:
    # A file already in $TORCH_HOME/hub/checkpoints under torchvision's name is used, no network.
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    cache = tmp_path / "hub" / "checkpoints"
    cache.mkdir(parents=True)
    (cache / TORCHVISION_FILE).symlink_to(random_weights)
    teacher = MaskRCNNTeacher(**SMALL)
    assert teacher.weights_source.endswith(TORCHVISION_FILE)


def test_download_from_url_and_failure(random_weights: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "home"))
    # torch.hub's downloader reads file:// URLs too, so the real download-and-cache path runs
    teacher = MaskRCNNTeacher(weights_url=random_weights.as_uri(), **SMALL)
    assert (tmp_path / "home" / "hub" / "checkpoints" / random_weights.name).is_file()
    assert teacher.weights_source == random_weights.as_uri()
    missing = (tmp_path / "mirror" / TORCHVISION_FILE).as_uri()
    with pytest.raises(TeacherError, match="weights_path=") as err:
        MaskRCNNTeacher(weights_url=missing, **SMALL)
    assert str(tmp_path / "home" / "hub" / "checkpoints" / TORCHVISION_FILE) in str(err.value)


def test_options_are_checked(random_weights: Path) -> None:
    with pytest.raises(TeacherError, match="score_threshold"):
        MaskRCNNTeacher(weights_path=random_weights, score_threshold=2, **SMALL)
    with pytest.raises(TeacherError, match="min_size"):
        MaskRCNNTeacher(weights_path=random_weights, device="cpu", min_size=900, max_size=800)
    with pytest.raises(TeacherError, match="match no COCO class"):
        MaskRCNNTeacher(class_names=("person", "tree", "background"), weights_path=random_weights, **SMALL)
    with pytest.raises(TeacherError, match="unknown device"):
        MaskRCNNTeacher(weights_path=random_weights, min_size=96, device="gpu")


@pytest.mark.slow
def test_batch_labels_equal_the_host_path_of_the_full_forward(random_weights: Path) -> None:
    # The host path as it was: torchvision's whole forward (every mask pasted into the image as floats),
    # copied to the host, thresholded and painted with NumPy. Frames of three sizes, two of them not the
    # detector's internal size, in one batch; every COCO class is a task class so that every detection
    # above the lowered threshold is painted, overlapping (the class order and crafted edge cases:
    # test_device_paint).
    rng = np.random.default_rng(7)
    frames = [rng.integers(0, 256, (h, w, 3), dtype=np.uint8) for h, w in [(96, 128), (120, 90), (70, 150)]]
    names = (*COCO_CLASSES, "background")
    lut = checked_class_lut(COCO_CATEGORY_NAMES, names, "COCO")
    teacher = MaskRCNNTeacher(class_names=names, weights_path=random_weights, score_threshold=0.05, **SMALL)
    taught = teacher.teach_batch(frames)
    images = [torch.from_numpy(f[:, :, ::-1].copy()).permute(2, 0, 1).float() / 255 for f in frames]
    with torch.inference_mode():
        raw = teacher._model(images)
    painted = detections = 0
    for frame, out, got in zip(frames, raw, taught, strict=True):
        scores = out["scores"].numpy()
        want = paint_instances((out["masks"][:, 0] > 0.5).numpy(), scores, out["labels"].numpy(), lut,
                               len(COCO_CLASSES), len(names), 0.05)
        assert got.labels.shape == frame.shape[:2]
        np.testing.assert_array_equal(got.labels, want)
        np.testing.assert_array_equal(got.boxes, kept_boxes(out["boxes"].numpy(), scores, 0.05))
        painted += int((want != len(COCO_CLASSES)).sum())
        detections += len(got.boxes)
    assert detections >= 30 and painted > 1000, (detections, painted)  # not a comparison of blank maps


def test_precision_option(random_weights: Path, frames: list[np.ndarray]) -> None:
    teacher = MaskRCNNTeacher(weights_path=random_weights, precision="bf16", score_threshold=0.3, **SMALL)
    (taught,) = teacher.teach_batch(frames[:1])
    assert taught.labels.shape == (96, 128) and taught.labels.dtype == np.uint8 and len(taught.boxes) > 0
    assert teacher.describe()["precision"] == "bf16"
    assert MaskRCNNTeacher(weights_path=random_weights, **SMALL).describe()["precision"] == "fp32"
    with pytest.raises(TeacherError, match="precision must be one of fp32, tf32, bf16"):
        MaskRCNNTeacher(weights_path=random_weights, precision="fp16", **SMALL)
