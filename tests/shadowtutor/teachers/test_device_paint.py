"""Device-side painting against the host oracle: torchvision's own paste of every mask into the
image, thresholded and painted by :func:`paint_instances`, on crafted detections that cover
overlaps, both paint orders, the score and mask thresholds, unmapped classes and boxes that stick
out of the frame or are degenerate. On CPU tensors always; on CUDA tensors too where a GPU is."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torchvision.models.detection.roi_heads import paste_masks_in_image

from shadowtutor.classes import LVS_CLASSES
from shadowtutor.teachers.base import TeacherAnswer
from shadowtutor.teachers.class_maps import COCO_CATEGORY_NAMES, checked_class_lut
from shadowtutor.teachers.device_paint import paint_frames
from shadowtutor.teachers.instances import kept_boxes, paint_instances

LUT = checked_class_lut(COCO_CATEGORY_NAMES, LVS_CLASSES, "COCO")
BG = LVS_CLASSES.index("background")
# COCO ids the LVS classes take (person, bicycle, car, bus, truck, bird, dog, horse, elephant, giraffe)
# and some they do not (chair, tv): those stay unpainted
PAINTED, UNPAINTED = [1, 2, 3, 6, 8, 16, 18, 19, 22, 25], [62, 72]
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]


def host_oracle(det: dict[str, torch.Tensor], size: tuple[int, int], lut: np.ndarray, background: int,
                num_classes: int, score_threshold: float, mask_threshold: float, order: str) -> TeacherAnswer:
    """The host path: every mask pasted at full size by torchvision (on the detections' device),
    thresholded, copied to the host, painted with NumPy."""
    pasted = paste_masks_in_image(det["masks"], det["boxes"], size)
    scores = det["scores"].cpu().numpy()
    labels = paint_instances((pasted[:, 0] > mask_threshold).cpu().numpy(), scores, det["labels"].cpu().numpy(),
                             lut, background, num_classes, score_threshold, order=order)
    return TeacherAnswer(labels, kept_boxes(det["boxes"].cpu().numpy(), scores, score_threshold))


def crafted(generator: torch.Generator, n: int, height: int, width: int, classes: list[int]) -> dict:
    """``n`` detections with random boxes inside the frame as a detector clips them (some on its edges,
    so that the pasted masks stick out, some narrower than a pixel), scores and masks."""
    x0 = torch.rand(n, generator=generator) * width
    y0 = torch.rand(n, generator=generator) * height
    w = torch.rand(n, generator=generator) * width * 0.6
    h = torch.rand(n, generator=generator) * height * 0.6
    w[::7] = 0.3
    boxes = torch.stack([x0, y0, x0 + w, y0 + h], dim=1)
    boxes[::4, :2] = 0.0
    boxes = torch.minimum(boxes, torch.tensor([width, height, width, height], dtype=torch.float32))
    scores = torch.rand(n, generator=generator)
    scores[1::5] = scores[:1]  # ties: the later one in the detector's order ends on top
    labels = torch.tensor(classes)[torch.randint(len(classes), (n,), generator=generator)]
    masks = torch.rand(n, 1, 28, 28, generator=generator)
    masks[::3] = (masks[::3] > 0.5).float() * 0.5 + 0.25  # values at 0.25/0.75: bilinear mixes cross 0.5
    return {"boxes": boxes, "scores": scores, "labels": labels, "masks": masks}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("order", ["score", "class"])
def test_identical_to_the_host_path_on_crafted_detections(order: str, device: str) -> None:
    generator = torch.Generator().manual_seed(3)
    sizes = [(48, 64), (37, 91), (64, 20)]
    detections = [{k: v.to(device) for k, v in crafted(generator, n, h, w, PAINTED + UNPAINTED).items()}
                  for n, (h, w) in zip([40, 25, 0], sizes, strict=True)]
    for score_threshold, mask_threshold in [(0.5, 0.5), (0.2, 0.3), (0.0, 0.9)]:
        taught = paint_frames(detections, sizes, LUT, BG, len(LVS_CLASSES), score_threshold, mask_threshold, order)
        for det, size, got in zip(detections, sizes, taught, strict=True):
            want = host_oracle(det, size, LUT, BG, len(LVS_CLASSES), score_threshold, mask_threshold, order)
            assert got.labels.dtype == np.uint8 and got.labels.shape == size
            np.testing.assert_array_equal(got.labels, want.labels)
            np.testing.assert_array_equal(got.boxes, want.boxes)
    painted = paint_frames(detections[:1], sizes[:1], LUT, BG, len(LVS_CLASSES), 0.2, 0.3, order)[0].labels
    assert len(np.unique(painted)) >= 5  # the comparison above is not between two blank maps


def test_many_classes_give_int64_maps_and_bad_calls_are_refused() -> None:
    generator = torch.Generator().manual_seed(5)
    names = [f"class-{i}" for i in range(299)] + ["person", "background"]
    lut = np.full(91, 300, dtype=np.int64)
    lut[1] = 299
    det = crafted(generator, 12, 30, 40, [1, 62])
    (got,) = paint_frames([det], [(30, 40)], lut, 300, len(names), 0.0, 0.5, "score")
    want = host_oracle(det, (30, 40), lut, 300, len(names), 0.0, 0.5, "score")
    assert got.labels.dtype == np.int64 and (got.labels == 299).any()
    np.testing.assert_array_equal(got.labels, want.labels)
    assert paint_frames([], [], LUT, BG, len(LVS_CLASSES)) == []
    with pytest.raises(ValueError, match="2 detection sets for 1 frames"):
        paint_frames([det, det], [(30, 40)], LUT, BG, len(LVS_CLASSES))
