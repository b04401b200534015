"""The labeller registry: declared exclusions, and the labeller each combination of settings builds."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from edge_agent.settings import EdgeSettings, SettingsError
from shadowtutor.acceleration.change_based.backend import ChangeBasedOptions
from shadowtutor.acceleration.labellers.change_based import ChangeBasedLabeller
from shadowtutor.acceleration.labellers.cluster import ClusterLabeller
from shadowtutor.acceleration.labellers.flow_path import FlowPathLabeller
from shadowtutor.acceleration.labellers.registry import (
    ACCELERATIONS,
    LabellerConfigError,
    LabellerSpec,
    build_labeller,
    check,
)
from shadowtutor.acceleration.labellers.step_aside import StepAside
from shadowtutor.acceleration.labellers.student import StudentLabeller
from shadowtutor.acceleration.regions.labeller import FlowPathConfig
from shadowtutor.classes import LVS_CLASSES
from shadowtutor.models.student import StudentNet


@pytest.mark.parametrize(("on", "backend", "student_size", "message"), [
    ({"change_based", "flow_path"}, "auto", False, "change_based .* and flow_path exclude each other"),
    ({"change_based", "cluster"}, "auto", False, "change_based .* and cluster exclude each other"),
    ({"flow_path"}, "auto", True, "flow_path .* and student_size exclude each other"),
    ({"cluster"}, "torch", True, "cluster .* and student_size exclude each other"),
    ({"change_based"}, "cuda", False, "change_based runs with the onnx or torch backend .*not cuda"),
])
def test_declared_exclusions_are_refused(on: set[str], backend: str, student_size: bool, message: str) -> None:
    with pytest.raises(LabellerConfigError, match=message):
        check(on, backend, student_size)


def test_exclusions_are_symmetric_and_what_combines_passes() -> None:
    names = {a.name for a in ACCELERATIONS}
    for a in ACCELERATIONS:
        for other in a.excludes & names:
            assert a.name in next(b for b in ACCELERATIONS if b.name == other).excludes, (a.name, other)
    check({"flow_path", "cluster"}, "torch")  # the cluster's workers follow the flow path's settings
    check({"change_based"}, "onnx", student_size=True)


def test_the_edge_settings_refuse_what_the_registry_declares() -> None:
    with pytest.raises(SettingsError, match="change_based .* and flow_path exclude each other"):
        EdgeSettings(server="ws://h", source="x", change_based=True, flow_path=True)
    spec = EdgeSettings(server="ws://h", source="x", flow_path=True, cluster="127.0.0.1:6379").labeller_spec()
    assert spec.on() == {"cluster"} and spec.flow_path is not None and spec.trial_frames == 60


def student_state() -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    return StudentNet(len(LVS_CLASSES)).state_dict()


def test_each_combination_builds_its_labeller_and_they_all_label() -> None:
    frame = np.random.default_rng(0).integers(0, 256, (48, 64, 3), dtype=np.uint8)
    plain = build_labeller(LabellerSpec(backend="torch"))
    change = build_labeller(LabellerSpec(backend="torch", change_based=ChangeBasedOptions(scale=0.0)))
    flow = build_labeller(LabellerSpec(backend="torch", flow_path=FlowPathConfig(), flow_path_on=True))
    tried = build_labeller(LabellerSpec(backend="torch", flow_path=FlowPathConfig(), flow_path_on=True, trial_frames=5))
    assert type(plain) is StudentLabeller and type(change) is ChangeBasedLabeller
    assert type(flow) is FlowPathLabeller and type(tried) is StepAside and type(tried.candidate) is FlowPathLabeller
    assert type(build_labeller(LabellerSpec(flow_path=FlowPathConfig(), cluster="auto"))) is ClusterLabeller
    assert type(build_labeller(LabellerSpec(trial_frames=5))) is StudentLabeller  # nothing to put on trial
    expected = None
    for labeller in (plain, change, flow, tried):
        with pytest.raises(RuntimeError, match="no weights yet"):
            labeller.label(frame)
        labeller.load(student_state(), LVS_CLASSES)
        labels = labeller.label(frame)
        expected = labels if expected is None else expected
        assert labels.shape == (48, 64) and np.array_equal(labels, expected)  # the same student, whole first frame
    assert change.kind == "torch+change-based" and flow.kind == "torch+flow-path"
    assert change.stats().change is not None and flow.stats().regions is not None and plain.stats().regions is None
