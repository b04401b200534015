from __future__ import annotations

import dataclasses

import pytest

from shadowtutor.protocol.agreement import Agreement


def test_an_agreement_is_one_frozen_value_named_field_by_field() -> None:
    agreement = Agreement(frame_codec="raw", weight_codec="f16+zstd", delta_codec="q8delta+zstd", student_size=(32, 24))
    with pytest.raises(TypeError):
        Agreement("raw", "f16+zstd")  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        agreement.frame_codec = "jpeg"  # type: ignore[misc]
    assert agreement == Agreement(frame_codec="raw", weight_codec="f16+zstd", delta_codec="q8delta+zstd",
                                  student_size=(32, 24))
    assert agreement != dataclasses.replace(agreement, student_size=None)
