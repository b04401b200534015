from __future__ import annotations

import pytest
import torch

from edge_agent.runtime import StudentRuntime
from edge_agent.versioning import VersionedStudent, WeightUpdate
from shadowtutor.classes import LVS_CLASSES
from shadowtutor.models.student import StudentNet
from shadowtutor.protocol.codecs import TensorBlob, encode_tensors
from shadowtutor.protocol.sparse_delta import CoordinateSet, encode_sparse


def full_state(seed: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    return StudentNet(len(LVS_CLASSES)).state_dict()


def partial(value: float) -> tuple[str, TensorBlob]:
    """A partial update setting the output bias to ``value``, as it travels."""
    return "f32", encode_tensors({"out_conv3.bias": torch.full((9,), value)}, "f32")


def make() -> tuple[VersionedStudent, list[tuple[int, str]]]:
    resyncs: list[tuple[int, str]] = []
    student = VersionedStudent(StudentRuntime("reference"), LVS_CLASSES, lambda have, why: resyncs.append((have, why)))
    student.stage(
        WeightUpdate(session_id="a", version=0, base_version=0, full=True, tensors=full_state(0), origin="welcome")
    )
    student.sync()
    return student, resyncs


def held(student: VersionedStudent, key: str) -> torch.Tensor:
    return student.runtime.labeller.require().student.state_dict()[key]


def bias(student: VersionedStudent) -> float:
    return float(held(student, "out_conv3.bias")[0])


def test_updates_apply_in_version_order() -> None:
    student, resyncs = make()
    student.apply(
        WeightUpdate(session_id="a", version=1, base_version=0, full=False, tensors={}, origin="update",
                     blob=partial(1.0))
    )
    student.apply(
        WeightUpdate(session_id="a", version=2, base_version=1, full=False, tensors={}, origin="update",
                     blob=partial(2.0))
    )
    assert (student.version, bias(student), resyncs) == (2, 2.0, [])
    assert [(h.version, h.origin) for h in student.history] == [(0, "welcome"), (1, "update"), (2, "update")]
    assert student.updates_applied == 2


def test_a_stale_base_is_not_applied_and_asks_for_a_resync() -> None:
    student, resyncs = make()
    student.apply(
        WeightUpdate(session_id="a", version=5, base_version=4, full=False, tensors={}, origin="update",
                     blob=partial(9.0))
    )
    assert student.version == 0 and bias(student) == 0.0 and student.rejected == 1
    assert resyncs[0][0] == 0 and "4->5" in resyncs[0][1]


def test_an_update_from_another_session_is_stale_even_with_the_same_base() -> None:
    student, resyncs = make()
    student.apply(
        WeightUpdate(session_id="b", version=1, base_version=0, full=False, tensors={}, origin="update",
                     blob=partial(9.0))
    )
    assert student.version == 0 and len(resyncs) == 1


def test_full_weights_apply_whatever_the_edge_holds() -> None:
    student, resyncs = make()
    student.apply(
        WeightUpdate(session_id="a", version=8, base_version=3, full=True, tensors=full_state(1), origin="update")
    )
    assert student.version == 8 and resyncs == []
    assert torch.equal(held(student, "in_conv1.weight"), full_state(1)["in_conv1.weight"])


def test_staged_weights_wait_for_sync_and_the_newest_wins() -> None:
    student, _ = make()
    student.stage(
        WeightUpdate(session_id="a", version=3, base_version=0, full=True, tensors=full_state(1), origin="resync")
    )
    student.stage(
        WeightUpdate(session_id="b", version=0, base_version=0, full=True, tensors=full_state(2), origin="welcome")
    )
    assert student.version == 0 and student.session_id == "a"
    student.frame_index = 17
    assert student.sync().session_id == "b"
    assert student.sync() is None
    assert (student.session_id, student.version, student.history[-1].frame_index) == ("b", 0, 17)
    assert torch.equal(held(student, "in_conv1.weight"), full_state(2)["in_conv1.weight"])


def sparse_update(
    version: int, coordinates: CoordinateSet, with_set: bool, payload: bytes | None = None
) -> WeightUpdate:
    deltas = torch.ones(coordinates.size)
    descriptors, encoded = encode_sparse(deltas, coordinates, "q4sparse+zstd", with_set)
    blob = TensorBlob(descriptors, encoded if payload is None else payload)
    return WeightUpdate(
        session_id="a",
        version=version,
        base_version=version - 1,
        full=False,
        tensors={},
        origin="update",
        blob=("q4sparse+zstd", blob),
    )


def test_sparse_updates_apply_against_the_held_set_and_a_bad_one_asks_for_a_resync() -> None:
    student, resyncs = make()
    mask = torch.zeros(9, dtype=torch.bool)
    mask[:2] = True
    coordinates = CoordinateSet.from_masks(4, {"out_conv3.bias": mask})
    student.apply(sparse_update(1, coordinates, with_set=True))
    student.apply(sparse_update(2, coordinates, with_set=False))
    assert (student.version, resyncs) == (2, [])
    assert held(student, "out_conv3.bias")[:3].tolist() == [2.0, 2.0, 0.0]
    # deltas for a set the edge does not hold, and a cut payload: refused, nothing changes, a resync
    other = CoordinateSet.from_masks(5, {"out_conv3.bias": mask})
    student.apply(sparse_update(3, other, with_set=False))
    student.apply(sparse_update(3, coordinates, with_set=False, payload=b"\x28\xb5\x2f\xfd"))
    assert student.version == 2 and len(resyncs) == 2 and student.rejected == 2
    assert held(student, "out_conv3.bias")[:3].tolist() == [2.0, 2.0, 0.0]
    # full weights clear the held set: the next sparse update must carry its set again
    student.apply(
        WeightUpdate(session_id="a", version=9, base_version=2, full=True, tensors=full_state(0), origin="resync")
    )
    student.apply(sparse_update(10, coordinates, with_set=False))
    assert student.version == 9 and len(resyncs) == 3


def test_a_weight_update_is_built_field_by_field() -> None:
    with pytest.raises(TypeError):
        WeightUpdate("a", 0, 0, True, full_state(0), "welcome")  # type: ignore[misc]
