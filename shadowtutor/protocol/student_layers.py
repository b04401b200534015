"""The names of the student's change-threshold points, as edges report them in TELEMETRY.

A point is the input of one layer of the student
(:mod:`shadowtutor.acceleration.change_based.thresholds` defines what each thresholds). The names
are part of the wire format: the server accepts a report of any name in :data:`STUDENT_LAYERS` and
nothing else.
"""

from __future__ import annotations

BLOCKS = ("enc1", "enc2", "enc3", "dec1", "dec2", "dec3")
BLOCK_POINTS = ("", ".conv2", ".conv3")
THRESHOLD_NAMES: tuple[str, ...] = (
    "in_conv1",
    "in_conv2",
    *(f"{block}{point}" for block in BLOCKS for point in BLOCK_POINTS),
    "tail",
    "output",
)
# Points of the threshold file's version 1 that version 2 has not: what older edges may still
# report.
RETIRED_NAMES: tuple[str, ...] = ("out_conv1", "out_conv2")
STUDENT_LAYERS: tuple[str, ...] = THRESHOLD_NAMES + RETIRED_NAMES
