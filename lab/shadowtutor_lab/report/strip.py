"""The report's strip: at chosen frames, the frame overlaid with the teacher's, ShadowTutor's and Wild's labels."""

from __future__ import annotations

import base64
from collections.abc import Sequence

import cv2
import numpy as np

from shadowtutor.classes import background_index

PANELS = (("teacher", "teacher"), ("p8", "ShadowTutor"), ("wild", "Wild"))
_GAP = 4


def strip_image(frame: np.ndarray, labels: dict[str, np.ndarray], class_names: Sequence[str]) -> np.ndarray:
    """Teacher | ShadowTutor | Wild side by side, each the frame with its labels overlaid, captioned (BGR)."""
    from edge_agent.sinks import overlay

    background = background_index(tuple(class_names))
    height, width = frame.shape[:2]
    caption = max(14, height // 12)
    panels = []
    for key, title in PANELS:
        panel = np.full((height + caption, width, 3), 255, np.uint8)
        panel[caption:] = overlay(frame, labels[key], background)
        cv2.putText(panel, title, (3, caption - 4), cv2.FONT_HERSHEY_SIMPLEX, caption / 30, (0, 0, 0), 1,
                    cv2.LINE_AA)
        panels.append(panel)
    gap = np.full((height + caption, _GAP, 3), 255, np.uint8)
    return np.hstack([panels[0], gap, panels[1], gap, panels[2]])


def png_data_uri(image: np.ndarray) -> str:
    """A BGR image as a ``data:image/png;base64,...`` URI."""
    ok, encoded = cv2.imencode(".png", image)
    if not ok:
        raise RuntimeError("cannot encode the strip as PNG")
    return "data:image/png;base64," + base64.b64encode(encoded.tobytes()).decode("ascii")
