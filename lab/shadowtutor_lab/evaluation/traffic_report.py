"""The traffic benchmark's report: ``PREFIX.json`` (the results object) and ``PREFIX.md`` (tables)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shadowtutor_lab.evaluation.markdown import markdown_table


def _kb(value: float) -> str:
    return f"{value / 1000:.1f}"


def _signed(value: float) -> str:
    return f"{value:+.2f}"


def _settings_table(results: Mapping[str, Any]) -> list[str]:
    scenes = list(results["settings"][0]["scenes"])
    header = ["setting", "frame up, kB", "encode, ms", "update down, kB", "key frame, kB", "of the paper's",
              "mIoU P-8", "ΔmIoU mean", *(f"Δ {name}" for name in scenes)]
    rows = []
    for s in results["settings"]:
        mean = s["mean"]
        label = f"**{s['label']}**" if s["label"] == results["defaults"] else s["label"]
        rows.append([
            label, _kb(mean["frame_bytes_720p"]), f"{mean['frame_encode_ms_720p']:.1f}", _kb(mean["update_bytes"]),
            _kb(mean["key_frame_bytes_720p"]), f"{100 * s['verdict']['fraction_of_paper']:.1f}%",
            f"{mean['miou']:.2f}", _signed(mean["miou_difference"]),
            *(_signed(s["scenes"][name]["miou_difference"]) for name in scenes),
        ])
    return markdown_table(header, rows)


def _defaults_table(setting: Mapping[str, Any]) -> list[str]:
    header = ["scene", "frame up, kB", "update down, kB (max)", "key frame, kB", "key frames", "steps",
              "mIoU uncompressed", "mIoU defaults", "Δ"]
    rows = [
        [name, _kb(r["frame_bytes_720p"]), f"{_kb(r['update_bytes'])} ({_kb(r['update_bytes_max'])})",
         _kb(r["key_frame_bytes_720p"]), str(r["key_frames"]), f"{r['mean_steps']:.2f}",
         f"{r['miou_uncompressed']:.2f}", f"{r['miou']:.2f}", _signed(r["miou_difference"])]
        for name, r in setting["scenes"].items()
    ]
    return markdown_table(header, rows)


def _verdict_text(setting: Mapping[str, Any], target: Mapping[str, Any]) -> str:
    v, mean = setting["verdict"], setting["mean"]
    size = (f"{_kb(mean['key_frame_bytes_720p'])} kB per key frame at 720p on average, "
            f"{_kb(mean['largest_key_frame_bytes_720p'])} kB on the heaviest scene "
            f"({100 * v['fraction_of_paper']:.1f}% of the paper's 3.03 MB)")
    accuracy = (f"P-8 mIoU {_signed(mean['miou_difference'])} points against uncompressed over the scenes "
                f"({_signed(mean['worst_miou_difference'])} on the worst one)")
    if v["met"]:
        return f"**Target met**: {size}; {accuracy} (target: at most {_kb(target['key_frame_bytes_720p'])} kB " \
               f"on every scene, mean mIoU at most {target['miou_points']:g} point lower)."
    misses = []
    if not v["bytes_met"]:
        misses.append(f"{_kb(v['bytes_over_target'])} kB over {_kb(target['key_frame_bytes_720p'])} kB")
    if not v["miou_met"]:
        misses.append(f"{v['miou_points_short']:.2f} mIoU points beyond the {target['miou_points']:g}-point margin")
    return f"**Target missed** ({'; '.join(misses)}): {size}; {accuracy}."


def render_markdown(results: Mapping[str, Any]) -> str:
    meta, target = results["meta"], results["target"]
    defaults = next(s for s in results["settings"] if s["label"] == results["defaults"])
    frames = ", ".join(f"{name} {n}" for name, n in meta["frames_per_scene"].items())
    machine = meta["machine"]
    lines = [
        "# Traffic budget: bytes per key frame at 720p and the student's accuracy",
        "",
        "Made by (the scenes first, then the benchmark):",
        "",
        "```",
        *meta["scene_commands"],
        meta["command"],
        "```",
        "",
        f"Each setting runs {meta['setting']} (partial distillation, the update landing 8 frames after its key "
        f"frame) in the in-process harness at {meta['size']} ({frames} frames), with its codecs applied to what "
        f"crosses the simulated link: the server trains on the decoded key frame and the edge runs what it decodes "
        f"from the server's updates. Teacher: {meta['teacher']}, so mIoU is against the truth. Student: "
        f"`{meta['student']['path']}` (sha256 {meta['student']['sha256'][:12]}…); backend {meta['backend']}; "
        f"{machine['cpu_model']}, {meta['workers']} worker(s). {meta['runs']} runs (a setting on a scene) of "
        f"{meta['run_seconds'] / 60:.1f} min in all, {meta['runs_reused']} of them reused from stored traces by "
        f"this invocation ({meta['wall_seconds'] / 60:.1f} min).",
        "",
        "Bytes are whole protocol messages (envelope, JSON header and payload, as both sides count them). "
        f"*Frame up*: the KEY_FRAME message of the scene's frames at 1280x720 (mean of {meta['frame_samples']} "
        "frames spread over each scene; "
        "*encode*: median time to encode one on this machine). *Update down*: the mean UPDATE message of the run "
        "(its size does not depend on the resolution). *Key frame* = frame up + update down. ΔmIoU: the "
        "setting's P-8 mIoU minus the uncompressed setting's on the same scene, in points.",
        "",
        f"## Chosen defaults: {results['defaults']}",
        "",
        _verdict_text(defaults, target),
        "",
        *_defaults_table(defaults),
        "",
        f"The agent offers frame codecs {meta['defaults']['frame_codecs']} at quality "
        f"{meta['defaults']['frame_quality']} and weight codecs {meta['defaults']['weight_codecs']}; the server "
        "allows every codec and takes the first the edge offers (docs/protocol.md, \"Codec negotiation\").",
        "",
        "## Every setting (means over the scenes; the defaults in bold)",
        "",
        *_settings_table(results),
        "",
    ]
    if meta["notes"]:
        lines += ["## Notes", "", *(f"- {note}" for note in meta["notes"]), ""]
    return "\n".join(lines)


def write_report(prefix: Path, results: Mapping[str, Any]) -> tuple[Path, Path]:
    """Write ``prefix.json`` and ``prefix.md``; returns both paths."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    json_path, md_path = prefix.with_name(prefix.name + ".json"), prefix.with_name(prefix.name + ".md")
    json_path.write_text(json.dumps(results, indent=1) + "\n")
    md_path.write_text(render_markdown(results))
    return json_path, md_path
