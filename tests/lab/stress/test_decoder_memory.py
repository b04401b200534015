from __future__ import annotations

import pytest

from shadowtutor.protocol.h264_sps import sequence_parameters
from shadowtutor_lab.stress.decoder_memory import main, moving_noise, x264_units


def test_the_stream_asks_for_the_references_given_and_the_report_is_one_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    units = x264_units(moving_noise(64, 48, 3), refs=3)
    assert [p.max_num_ref_frames for p in sequence_parameters(units[0])] == [3]
    assert main(["--width", "64", "--height", "48", "--refs", "2", "--frames", "3", "--decoders", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("64x48, 2 reference frames, 3 frames: ") and "left after closing 2" in out
