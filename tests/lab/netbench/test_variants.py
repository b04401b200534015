"""The compared setups and the agent flags that choose their codecs."""

from __future__ import annotations

import pytest

from shadowtutor_lab.netbench.variants import build_variants


def test_defaults_leave_shadowtutor_on_the_agents_codecs() -> None:
    shadow, h264, jpeg, raw = build_variants()
    assert (shadow.name, shadow.mode, shadow.edge_args) == ("shadowtutor", "distill", ())
    assert (h264.mode, h264.edge_args) == ("naive", ("--frame-codecs", "h264"))
    assert (jpeg.mode, jpeg.edge_args) == ("naive", ("--frame-codecs", "jpeg"))
    assert (raw.mode, raw.edge_args) == ("naive", ("--frame-codecs", "raw"))
    assert [v.title for v in (shadow, h264, jpeg, raw)] == ["ShadowTutor", "naive (H.264 stream)", "naive (JPEG)",
                                                             "naive (raw)"]


def test_codec_choices_reach_the_agent_flags() -> None:
    shadow, h264, jpeg, raw = build_variants(frame_codecs="jpeg", jpeg_quality=70, weight_codecs="f16+zstd")
    assert shadow.edge_args == ("--frame-codecs", "jpeg", "--weight-codecs", "f16+zstd", "--frame-quality", "70")
    assert h264.edge_args == ("--frame-codecs", "h264")
    assert jpeg.edge_args == ("--frame-codecs", "jpeg", "--frame-quality", "70")
    assert raw.edge_args == ("--frame-codecs", "raw")


def test_a_subset_in_the_order_given() -> None:
    assert [v.name for v in build_variants(["naive-raw", "shadowtutor"])] == ["naive-raw", "shadowtutor"]


@pytest.mark.parametrize("names", [[], ["full"]])
def test_unknown_or_no_variants_are_refused(names: list[str]) -> None:
    with pytest.raises(ValueError, match="choose from"):
        build_variants(names)
