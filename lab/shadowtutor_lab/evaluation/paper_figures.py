"""The paper's own accuracy figures (Tables 5, 6 and 7 of the ShadowTutor paper), to print beside ours.

Per (camera, category) of the LVS videos, all against its Mask R-CNN teacher: P-1 and P-8 mIoU (%)
and the key-frame ratio (%) of partial distillation at the videos' 25-30 FPS (Tables 6 and 5), and
the same for the videos re-sampled to 7 FPS (Table 7).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple


class PaperRow(NamedTuple):
    p1_miou: float
    p8_miou: float
    key_frame_ratio: float
    p1_miou_7fps: float
    p8_miou_7fps: float
    key_frame_ratio_7fps: float


PAPER_ROWS: dict[tuple[str, str], PaperRow] = {
    ("fixed", "animals"): PaperRow(74.31, 73.27, 4.73, 62.72, 61.86, 6.59),
    ("fixed", "people"): PaperRow(81.69, 81.39, 1.96, 80.44, 80.08, 1.97),
    ("fixed", "street"): PaperRow(70.26, 69.01, 7.78, 63.78, 62.51, 8.90),
    ("moving", "animals"): PaperRow(74.94, 73.80, 2.55, 68.63, 66.78, 4.84),
    ("moving", "people"): PaperRow(74.82, 74.06, 3.45, 73.66, 72.91, 4.15),
    ("moving", "street"): PaperRow(60.48, 58.61, 11.70, 48.92, 46.99, 12.34),
    ("egocentric", "people"): PaperRow(70.42, 68.87, 5.46, 67.57, 66.09, 5.44),
}
PAPER_AVERAGE = PaperRow(72.42, 71.29, 5.38, 66.53, 65.31, 6.32)


def paper_row(camera: object, category: object) -> PaperRow | None:
    """The paper's row of this camera and category, None where the paper has none."""
    return PAPER_ROWS.get((str(camera), str(category)))


def beside_the_paper(results: Mapping[str, Mapping[str, Any]]) -> list[list[str]]:
    """Rows: scene, camera, category, our P-8 and key frames (P-8), the paper's at full and at 7 FPS."""
    rows = []
    for name, r in results.items():
        paper = paper_row(r.get("camera"), r.get("category"))
        ours = [f"{r['p8_miou']:.2f}" if r.get("p8_miou") is not None else "n/a",
                f"{r['key_frame_ratio_p8']:.2f}" if r.get("key_frame_ratio_p8") is not None else "n/a"]
        theirs = [f"{v:.2f}" for v in _beside(paper)] if paper else ["-"] * 4
        rows.append([name, str(r.get("camera", "")), str(r.get("category", "")), *ours, *theirs])
    rows.append(["**paper's average**", "", "", "", "", *[f"{v:.2f}" for v in _beside(PAPER_AVERAGE)]])
    return rows


def _beside(row: PaperRow) -> tuple[float, float, float, float]:
    return row.p8_miou, row.key_frame_ratio, row.p8_miou_7fps, row.key_frame_ratio_7fps
