"""``report.html`` of ``shadowtutor evaluate``: one page that opens offline (no scripts, no external resources).

:func:`render_report` takes the results object of :func:`shadowtutor_lab.evaluation.evaluate.evaluate` and
the strips' images and returns the page: per source (a ``section``), the recommendation first
(``class="recommendation"``), then the per-frame plot, the strip, traffic, the operating-point sweep and the
capacity plan (plots: ``figure class="plot ..."``; ``div class="strip"``, ``div class="capacity"``). Plots are
inline SVG, images base64 PNG; every number shown is also in the results JSON.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from shadowtutor.config.rates import format_rate
from shadowtutor_lab.evaluation.evaluate import StripFrame
from shadowtutor_lab.report.plots import per_frame_plot, sweep_plot, traffic_plot
from shadowtutor_lab.report.strip import png_data_uri, strip_image

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 70em; color: #222; line-height: 1.4; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; margin-top: 2em; }
table { border-collapse: collapse; margin: .8em 0; } td, th { border: 1px solid #ccc; padding: .25em .6em; }
th { background: #f3f3f3; text-align: left; } td.n { text-align: right; font-variant-numeric: tabular-nums; }
.cards { display: flex; gap: 1em; flex-wrap: wrap; } .card { border: 1px solid #ccc; border-radius: 6px;
padding: .6em 1em; } .card b { display: block; font-size: 1.5em; }
.recommendation { border: 2px solid #2a7; background: #effaf3; border-radius: 6px; padding: .8em 1.2em; }
.recommendation.missed { border-color: #c60; background: #fff6ec; }
figure { margin: 1em 0; } figure svg { max-width: 100%; height: auto; } figcaption { color: #555; }
img.strip { max-width: 100%; image-rendering: pixelated; border: 1px solid #ddd; }
code { background: #f5f5f5; padding: 0 .2em; } .muted { color: #666; font-size: .9em; }
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} %"


def _bytes(value: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if value >= scale:
            return f"{value / scale:.2f} {unit}"
    return f"{value:.0f} B"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], numeric_from: int = 1) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(f"<td class='n'>{c}</td>" if i >= numeric_from else f"<td>{c}</td>"
                         for i, c in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _recommendation(name: str, video: Mapping[str, Any]) -> str:
    rec = video["sweep"]["recommendation"]
    point = rec["point"]
    verdict = "target met" if rec["met"] else "no point meets the target; this is the nearest"
    return (
        f"<div id='recommendation-{_e(name)}' class='recommendation{'' if rec['met'] else ' missed'}'>"
        f"<strong>Recommended operating point:</strong> THRESHOLD {point['setting']}, "
        f"MIN_STRIDE {point['min_stride']} &mdash; {point['key_frame_ratio']:.1f} % key frames, "
        f"P-8 {point['p8_miou']:.1f} % mIoU against the teacher, uplink {_e(format_rate(point['uplink_bps']))} "
        f"per camera.<br>Target: {_e(rec['target_text'])} ({verdict}). Run the edges with "
        f"<code>--threshold {point['setting']} --min-stride {point['min_stride']}</code>.</div>"
    )


def _cards(video: Mapping[str, Any]) -> str:
    s = video["summary"]
    cards = (("Wild (student alone)", _pct(s["wild_miou"])), ("ShadowTutor (P-8)", _pct(s["shadowtutor_miou"])),
             ("naive offloading", _pct(s["naive_miou"])), ("key frames", _pct(s["key_frame_ratio"])),
             ("mean stride", f"{s['mean_stride']:.1f}"))
    return "<div class='cards'>" + "".join(
        f"<div class='card'>{_e(title)}<b>{value}</b></div>" for title, value in cards) + "</div>"


def _strip(name: str, strip: Sequence[StripFrame], class_names: Sequence[str]) -> str:
    items = []
    for moment in strip:
        if moment.frame is None:
            continue
        uri = png_data_uri(strip_image(moment.frame, moment.labels, class_names))
        items.append(f"<figure><img class='strip' alt='frame {moment.index}: teacher, ShadowTutor, Wild' "
                     f"src='{uri}'><figcaption>frame {moment.index} ({_e(moment.why)}): teacher | ShadowTutor "
                     f"(P-8) | Wild</figcaption></figure>")
    return f"<div id='strip-{_e(name)}' class='strip'>{''.join(items)}</div>"


TRAFFIC_ROWS = (("shadowtutor", "ShadowTutor (P-8)"), ("naive", "naive offloading"),
                ("naive_jpeg", "naive offloading"))


def _traffic(video: Mapping[str, Any]) -> str:
    traffic = video["traffic"]
    rows = []
    for key, title in TRAFFIC_ROWS:
        t = traffic[key]
        title += f" ({traffic['naive_codecs'][key]})" if key in traffic["naive_codecs"] else ""
        rows.append([title, _bytes(t["up_bytes_per_frame"]), _bytes(t["down_bytes_per_frame"]),
                     _bytes(t["up_bytes_per_hour"]), _bytes(t["down_bytes_per_hour"]), _e(format_rate(t["up_bps"])),
                     _e(format_rate(t["down_bps"]))])
    size = "x".join(str(v) for v in video["size"])
    fewer = traffic["x_fewer_than_h264"]
    ratios = ", ".join(f"{key} {'-' if fewer[key] is None else f'{fewer[key]:.2f}x'}" for key in ("up", "down", "both"))
    return (
        f"<p>Codecs: {_e(traffic['codecs'])}; whole protocol messages at {size}, {video['fps']:g} frames/s "
        "(ShadowTutor: KEY_FRAME up, UPDATE down; naive: every frame up as KEY_FRAME, LABELS down; with "
        "H.264 the frames are one stream). The model download at the start of a session is not counted.</p>"
        f"<p id='against-h264'>ShadowTutor against H.264 offloading, times fewer bytes: {ratios}.</p>"
        + _table(["", "up per frame", "down per frame", "up per hour", "down per hour", "uplink", "downlink"],
                 rows)
        + f"<figure class='plot traffic-plot'>{traffic_plot(traffic)}</figure>"
    )


def _sweep(video: Mapping[str, Any]) -> str:
    sweep = video["sweep"]
    front = {(p["setting"], p["min_stride"]) for p in sweep["pareto"]}
    chosen = sweep["recommendation"]["point"]
    rows = []
    for p in sorted(sweep["points"], key=lambda p: (p["min_stride"], p["policy"] == "auto", p["threshold"])):
        key = (p["setting"], p["min_stride"])
        mark = " &#9733;" if key == (chosen["setting"], chosen["min_stride"]) else ""
        rows.append([f"{p['setting']}{mark}", p["min_stride"], f"{p['key_frame_ratio']:.1f}",
                     f"{p['p8_miou']:.1f}", f"{p['mean_stride']:.1f}",
                     "-" if p["mean_steps"] is None else f"{p['mean_steps']:.2f}", _e(format_rate(p["uplink_bps"])),
                     "yes" if key in front else ""])
    return (
        f"<figure class='plot sweep-plot'>{sweep_plot(sweep)}<figcaption>Each point is one P-8 run over the same "
        "frames and cached teacher labels.</figcaption></figure>"
        + _table(["THRESHOLD", "MIN_STRIDE", "key frames %", "P-8 mIoU %", "mean stride", "steps/key frame",
                  "uplink", "Pareto"], rows, numeric_from=1)
    )


def _capacity(video: Mapping[str, Any]) -> str:
    capacity = video["capacity"]
    camera = capacity["camera"]
    intro = (
        f"<p>One camera at {camera['fps']:g} frames/s and the recommended point's "
        f"{100 * camera['key_frame_ratio']:.1f} % key frames sends {camera['key_frames_per_second']:.3f} key "
        f"frames/s and {_e(format_rate(8 * camera['uplink_bytes_per_second']))} up. "
        f"A {_e(format_rate(capacity['link_bps']))} link carries "
        f"<b>{capacity['cameras_per_link'] if capacity['cameras_per_link'] is not None else 'any number of'}</b> "
        "such cameras.</p>"
    )
    if not capacity["servers"]:
        return intro + ("<p>No server profile: give one with <code>--server-profile FILE</code> "
                        "(written by <code>shadowtutor bench server --profile-out FILE</code>).</p>")
    rows, bound_rows = [], []
    for s in capacity["servers"]:
        size = s["size"] + ("" if s["size_exact"] else " (nearest measured)")
        rows.append([_e(s["device"]), _e(s["teacher"]), _e(size), f"{s['key_frame_ms']:.1f}",
                     f"{s['key_frames_per_second']:.1f}", f"<b>{s['cameras']}</b>", _e(s["measured"])])
        b = s["bounds"]
        bound_rows.append([_e(s["device"]), f"{1e3 * b['t_si']:.1f}", f"{1e3 * b['t_ti']:.1f}",
                           f"{1e3 * b['t_sd']:.2f}", f"{1e3 * b['t_net']:.1f}", f"{b['traffic_mbps_max']:.2f}",
                           f"{b['throughput_fps_measured_min']:.1f} .. {b['throughput_fps_measured_max']:.1f}",
                           f"{b['throughput_fps_min']:.1f}", f"{b['throughput_fps_max']:.1f}"])
    return (
        intro
        + _table(["server (profile device)", "teacher", "key-frame size", "ms per key frame", "key frames/s",
                  "cameras per server", "measured"], rows, numeric_from=3)
        + "<p>Cameras per server = floor(server key frames/s / camera key frames/s); ms per key frame is the "
          "profile's, or teacher ms + step ms x the measured steps per key frame when those differ.</p>"
        + "<p>The analytic bounds of ShadowTutor's section 4.4 for this machine as the edge (its measured "
          "t<sub>si</sub>) with each server: eq. 12 (traffic upper bound), eq. 13 at the measured key frames "
          "and steps, eq. 14 and eq. 15 (throughput lower and upper bounds); t<sub>net</sub> is a key frame and "
          "its update over the link.</p>"
        + _table(["server", "t_si ms", "t_ti ms", "t_sd ms", "t_net ms", "eq. 12 Mbps max", "eq. 13 FPS",
                  "eq. 14 FPS min", "eq. 15 FPS max"], bound_rows)
    )


def _meta(results: Mapping[str, Any]) -> str:
    meta = results["meta"]
    params = ", ".join(f"{k}={v}" for k, v in meta["params"].items())
    notes = "".join(f"<li>{_e(n)}</li>" for n in meta["notes"])
    return (
        "<h2>How this was measured</h2><ul class='muted'>"
        f"<li>command: <code>{_e(meta['command'])}</code></li>"
        f"<li>teacher: {_e(meta['teacher'])} (mIoU is against the teacher, not a ground truth); "
        f"student backend {_e(meta['backend'])}, student {_e(meta['student']['path'])}</li>"
        f"<li>parameters: {_e(params)}</li>"
        f"<li>machine: {_e(meta['machine']['cpu_model'])}, {meta['machine']['cpu_count']} CPUs, "
        f"torch {_e(meta['machine']['torch'])}; {meta['wall_seconds']:.0f} s</li>"
        "<li>Wild: the pre-trained student alone. ShadowTutor: P-8, partial distillation with each update "
        "landing 8 frames after its key frame. Naive offloading: every frame sent in the frame codec and "
        "labelled by the teacher on the server.</li>"
        f"{notes}</ul>"
    )


def render_report(results: Mapping[str, Any], strips: Mapping[str, Sequence[StripFrame]],
                  class_names: Sequence[str]) -> str:
    """The whole page (see the module docstring)."""
    sections = []
    for name, video in results["videos"].items():
        size = "x".join(str(v) for v in video["size"])
        sections.append(
            f"<section id='video-{_e(name)}'><h1>ShadowTutor on {_e(name)}</h1>"
            f"<p class='muted'>{video['frames']} frames at {size}, {video['fps']:g} frames/s; teacher labels "
            f"{'from the cache' if video['labels_from_cache'] else 'computed'} ({_e(video['scene'])}).</p>"
            + _recommendation(name, video) + _cards(video)
            + "<h2>Per-frame accuracy</h2>"
            + f"<figure class='plot per-frame-plot'>{per_frame_plot(video)}<figcaption>mIoU of each frame against the "
              "teacher; below, ShadowTutor's stride and its key frames.</figcaption></figure>"
            + "<h2>Frames</h2>" + _strip(name, strips.get(name, ()), class_names)
            + "<h2>Traffic</h2>" + _traffic(video)
            + "<h2>Operating points</h2>" + _sweep(video)
            + f"<h2>Capacity plan</h2><div class='capacity' id='capacity-{_e(name)}'>" + _capacity(video)
            + "</div></section>"
        )
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<title>ShadowTutor evaluation</title>"
        f"<style>{_STYLE}</style></head><body>{''.join(sections)}{_meta(results)}</body></html>\n"
    )
