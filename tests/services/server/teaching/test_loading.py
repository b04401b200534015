"""Teacher options from the settings, and where the base student comes from."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import torch

from services.server.settings import ServerSettings
from services.server.teaching.loading import (
    PRETRAINED_MODULE,
    load_base_student,
    load_models,
    load_teacher,
    teacher_options,
)
from shadowtutor.models.checkpoint import save_student
from shadowtutor.models.student import StudentNet
from tests.support.scene import write_scene

CLASSES = ("person", "auto", "background")


def test_named_flags_become_backend_options(tmp_path: Path) -> None:
    onnx = ServerSettings(teacher="onnx", onnx_model=tmp_path / "m.onnx", device="cpu",
                          teacher_options={"channel_order": "bgr"}, teacher_classes="a,background")
    assert teacher_options(onnx, "cpu") == {
        "model_path": tmp_path / "m.onnx", "device": "cpu", "channel_order": "bgr", "class_names": ["a", "background"],
    }
    labels = ServerSettings(teacher="labels", labels_dir=tmp_path, device="cuda")
    assert teacher_options(labels, "cuda") == {"labels_dir": tmp_path, "device": "cuda"}  # every backend takes one
    maskrcnn = ServerSettings(teacher="maskrcnn", teacher_precision="bf16", device="cpu")
    assert teacher_options(maskrcnn, "cpu") == {"precision": "bf16", "device": "cpu"}
    assert "precision" not in teacher_options(ServerSettings(teacher="maskrcnn"), "cpu")
    own = ServerSettings(teacher="onnx", teacher_options={"device": "tensorrt"})
    assert teacher_options(own, "cuda")["device"] == "tensorrt"  # the teacher's own option wins
    with pytest.raises(ValueError, match="teacher_precision"):
        ServerSettings(teacher_precision="fp16")


def test_labels_teacher_from_settings(tmp_path: Path) -> None:
    scene = write_scene(tmp_path / "scene", count=2)
    teacher = load_teacher(ServerSettings(teacher="labels", labels_dir=scene.directory), "cpu")
    assert teacher.class_names == CLASSES
    assert (teacher.label(scene.frames[1], 1) == scene.labels[1]).all()


def test_the_device_is_resolved_once_and_given_to_the_teacher_and_distillation(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from shadowtutor import teachers

    resolved: list[str] = []
    built: dict[str, object] = {}
    build_teacher = teachers.build_teacher

    def resolve(device: str) -> str:
        resolved.append(device)
        return "cpu"

    def build(kind: str, **options: object) -> object:
        built.update(options)
        return build_teacher(kind, **options)

    monkeypatch.setattr("shadowtutor.teachers.device.resolve_torch_device", resolve)
    monkeypatch.setattr(teachers, "build_teacher", build)
    scene = write_scene(tmp_path / "scene", count=2)
    student = save_student(tmp_path / "s.pt", StudentNet(len(CLASSES)), CLASSES)
    models = load_models(ServerSettings(teacher="labels", labels_dir=scene.directory, device="auto", student=student))
    assert resolved == ["auto"]
    assert built["device"] == "cpu" and models.device == torch.device("cpu")


def test_an_unusable_device_stops_the_start_before_the_teacher_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    from shadowtutor.teachers import TeacherError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr("services.server.teaching.loading.load_teacher", lambda *a: pytest.fail("the teacher loaded"))
    with pytest.raises(TeacherError, match="CUDA is not available"):
        load_models(ServerSettings(teacher="labels", device="cuda"))
    with pytest.raises(TeacherError, match="unknown device 'gpu'"):
        load_models(ServerSettings(teacher="labels", device="gpu"))


def test_wrong_teacher_options_are_reported(tmp_path: Path) -> None:
    from shadowtutor.teachers import TeacherError

    with pytest.raises(TeacherError, match="bad options for the labels teacher"):
        load_teacher(ServerSettings(teacher="labels", labels_dir=tmp_path, weights_path=tmp_path / "w.pth"), "cpu")


def test_explicit_checkpoint(tmp_path: Path) -> None:
    torch.manual_seed(1)
    model = StudentNet(3)
    path = save_student(tmp_path / "s.pt", model, CLASSES)
    base = load_base_student(path, CLASSES)
    assert base.source == str(path) and base.class_names == CLASSES
    torch.testing.assert_close(base.instantiate().state_dict(), model.state_dict())
    with pytest.raises(ValueError, match="must be the same list in the same order"):
        load_base_student(path, ("auto", "person", "background"))


def test_fresh_student_while_no_pretrained_asset(monkeypatch: pytest.MonkeyPatch, caplog) -> None:
    monkeypatch.setitem(sys.modules, PRETRAINED_MODULE, None)  # importing it fails as if absent
    base = load_base_student(None, CLASSES)
    assert base.source == "fresh" and len(base.instantiate().state_dict()) == len(StudentNet(3).state_dict())
    assert "freshly initialised student" in caplog.text


def test_the_committed_pretrained_student_is_picked_up(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = save_student(tmp_path / "pretrained.pt", StudentNet(3), CLASSES)
    module = types.ModuleType(PRETRAINED_MODULE)
    module.default_student_path = lambda: path  # stands in for shadowtutor/models/pretrained.py
    monkeypatch.setitem(sys.modules, PRETRAINED_MODULE, module)
    assert load_base_student(None, CLASSES).source == str(path)
