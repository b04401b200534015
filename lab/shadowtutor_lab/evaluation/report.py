"""Writing the accuracy benchmark's ``results.json``, ``meta.json`` and ``results.md``.

``results.json`` is an object keyed by scene name (nothing else in it, so a consumer can
iterate it); the run's context (machine, command lines, student, parameters, definitions)
goes to ``meta.json``. ``results.md`` lays the numbers out like the paper's Tables 6, 5 and 2.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shadowtutor_lab.evaluation.machine import describe_machine
from shadowtutor_lab.evaluation.markdown import markdown_table
from shadowtutor_lab.evaluation.paper_figures import beside_the_paper

RESULTS_JSON = "results.json"
META_JSON = "meta.json"
RESULTS_MD = "results.md"


def _fmt(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _average(results: Mapping[str, Mapping[str, Any]], key: str) -> float | None:
    values = [r[key] for r in results.values() if r.get(key) is not None]
    return sum(values) / len(values) if values else None


def _scene_cells(name: str, r: Mapping[str, Any]) -> list[str]:
    return [name, str(r.get("camera", "")), str(r.get("category", ""))]


def _rows(
    results: Mapping[str, Mapping[str, Any]], columns: list[tuple[str, float, int]]
) -> list[list[str]]:
    """One row per scene and an average row; ``columns``: (key, scale, digits)."""

    def cells(values: list[float | None]) -> list[str]:
        return [
            _fmt(None if v is None else v * scale, digits)
            for v, (_, scale, digits) in zip(values, columns, strict=True)
        ]

    rows = [_scene_cells(name, r) + cells([r.get(k) for k, _, _ in columns]) for name, r in results.items()]
    rows.append(["**average**", "", ""] + cells([_average(results, k) for k, _, _ in columns]))
    return rows


def _run_lines(results: Mapping[str, Mapping[str, Any]], meta: Mapping[str, Any]) -> list[str]:
    machine = meta.get("machine", {})
    frames = meta.get("frames_per_scene", "all")
    scope = "Every frame of each scene" if frames == "all" else f"The first {frames} frames of each scene"
    per_scene = ", ".join(f"{name} {r['seconds']:.0f} s" for name, r in results.items() if "seconds" in r)
    lines = [
        f"{scope} at {meta.get('size', '?')}; student input scale {meta.get('student_size', 'native')}; "
        f"teacher `{meta.get('teacher', '?')}`; student inference "
        f"backend `{meta.get('backend', '?')}`; {meta.get('workers', 1)} worker process(es) with "
        f"{meta.get('threads', machine.get('torch_threads', '?'))} torch / ONNX Runtime thread(s) each.",
        f"Algorithm parameters: `{json.dumps(meta.get('params', {}))}`; training precision "
        f"`{meta.get('distill_precision', 'fp32')}`.",
        f"Machine: {describe_machine(machine)}.",
    ]
    if per_scene:
        lines.append(f"Harness time per scene (its two passes together): {per_scene}.")
    if "wall_seconds" in meta:
        reused = meta.get("reused_scenes", [])
        lines.append(f"Wall time of this invocation: {meta['wall_seconds']:.0f} s"
                     + (f" (reused stored traces of {', '.join(reused)})." if reused else "."))
    return lines


def render_markdown(results: Mapping[str, Mapping[str, Any]], meta: Mapping[str, Any]) -> str:
    real = [str(r.get("preset", "")).startswith("real:") for r in results.values()]
    kind = "real clips" if real and all(real) else "real clips and generated scenes" if any(real) else \
        "generated scenes"
    lines = [
        f"# Accuracy benchmark: the paper's Tables 6, 5 and 2 on {kind}",
        "",
        *_run_lines(results, meta),
        "",
        "Commands:",
        "",
        "```",
        *meta.get("scene_commands", []),
        meta.get("command", ""),
        "```",
        "",
        "## Mean IoU (%) against the teacher, every frame (Table 6)",
        "",
        "Wild: the pre-trained student alone. P: partial distillation, F: full; 1 or 8: frames between",
        "a key frame and the moment its update is applied.",
        "",
        *markdown_table(
            ["Scene", "Camera", "Category", "Wild", "P-1", "P-8", "F-1"],
            _rows(results, [(k, 1.0, 2) for k in ("wild_miou", "p1_miou", "p8_miou", "f1_miou")]),
        ),
        "",
        "## Key frames and data per key frame (Table 5, Table 4)",
        "",
        *markdown_table(
            ["Scene", "Camera", "Category", "Key frames P-1 (%)", "P-8 (%)", "F-1 (%)",
             "MB per key frame, partial", "full"],
            _rows(results, [("key_frame_ratio", 1.0, 2), ("key_frame_ratio_p8", 1.0, 2),
                            ("key_frame_ratio_full", 1.0, 2), ("bytes_per_key_frame", 1e-6, 3),
                            ("bytes_per_key_frame_full", 1e-6, 3)]),
        ),
        "",
        "MB = 10^6 bytes: the key frame as raw BGR bytes up plus the update as float32 down, the",
        "paper's accounting; the wire codecs of the deployed system can compress both.",
        "",
        "## Distillation steps (Table 2)",
        "",
        *markdown_table(
            ["Scene", "Camera", "Category", "One step partial (ms)", "One step full (ms)",
             "Mean # steps partial", "Mean # steps full"],
            _rows(results, [("distill_step_ms_partial", 1.0, 1), ("distill_step_ms_full", 1.0, 1),
                            ("mean_distill_steps_partial", 1.0, 2), ("mean_distill_steps_full", 1.0, 2)]),
        ),
        "",
        "## Beside the paper (its Tables 6, 5 and 7: the LVS row of the same camera and category)",
        "",
        "The paper's figures are its own, on LVS videos against Mask R-CNN; ours are against this run's",
        "teacher. Key frames are P-8's here and partial distillation's in the paper.",
        "",
        *markdown_table(
            ["Scene", "Camera", "Category", "P-8 here", "key frames here (%)", "P-8 paper", "key frames paper (%)",
             "P-8 paper, 7 FPS", "key frames paper, 7 FPS (%)"],
            beside_the_paper(results),
        ),
        "",
    ]
    notes = meta.get("notes", [])
    if notes:
        lines += ["## Notes", "", *[f"- {note}" for note in notes], ""]
    plots = meta.get("plots", {})
    if plots:
        lines += ["## Per-frame mIoU and stride", ""]
        lines += [f"![{name}]({path})" for name, path in plots.items()] + [""]
    return "\n".join(lines)


def write_report(out_dir: Path, results: Mapping[str, Mapping[str, Any]], meta: Mapping[str, Any]) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / RESULTS_JSON).write_text(json.dumps(results, indent=2) + "\n")
    (out_dir / META_JSON).write_text(json.dumps(meta, indent=2) + "\n")
    (out_dir / RESULTS_MD).write_text(render_markdown(results, meta))
