from __future__ import annotations

import base64

import cv2
import numpy as np

from shadowtutor.classes import LVS_CLASSES
from shadowtutor_lab.report.strip import png_data_uri, strip_image


def test_the_strip_shows_teacher_shadowtutor_and_wild_side_by_side() -> None:
    frame = np.full((48, 64, 3), 100, np.uint8)
    background, person = LVS_CLASSES.index("background"), LVS_CLASSES.index("person")
    labels = {key: np.full((48, 64), background, np.uint8) for key in ("teacher", "p8", "wild")}
    labels["teacher"][10:30, 10:30] = person  # only the teacher sees someone
    image = strip_image(frame, labels, LVS_CLASSES)
    caption = image.shape[0] - 48
    assert caption > 0 and image.shape[1] == 3 * 64 + 2 * 4
    panels = [image[caption:, x:x + 64] for x in (0, 68, 136)]
    assert not np.array_equal(panels[0], frame) and np.array_equal(panels[1], frame)
    assert np.array_equal(panels[2], frame)


def test_png_data_uri_round_trips() -> None:
    image = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    uri = png_data_uri(image)
    assert uri.startswith("data:image/png;base64,")
    decoded = cv2.imdecode(np.frombuffer(base64.b64decode(uri.split(",", 1)[1]), np.uint8), cv2.IMREAD_COLOR)
    assert np.array_equal(decoded, image)
