"""``docs/results.md`` from a network results file: tables shaped like the paper's Tables 3, 4 and 5,
the bandwidth sweep (Figure 4) with the retention ratios, mIoU, and Table 1's components with
the bounds they give and whether each measured FPS and Mbps lies within them."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from shadowtutor_lab.evaluation.markdown import markdown_table
from shadowtutor_lab.netbench.analysis import RunMetrics, all_metrics, mean_or_none, params_of, retention
from shadowtutor_lab.netbench.plots import plot_bytes_per_frame, plot_fps
from shadowtutor_lab.netbench.results import Results
from shadowtutor_lab.netbench.variants import BASELINE, NAIVE_RAW, SHADOWTUTOR, TITLES
from shadowtutor_lab.scenes.real import REAL_PRESET_PREFIX

FPS_PLOT = "fps_vs_bandwidth.png"
BYTES_PLOT = "bytes_per_frame.png"
PAPER_MBPS = 80.0  # the paper's setting (section 5.1)
LOW_MBPS = 8.0  # the narrowest link of its sweep
Metrics = dict[tuple[str, float, str], RunMetrics]


def _f(value: float | None, digits: int = 2) -> str:
    return "n/a" if value is None else f"{value:.{digits}f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return [*markdown_table(header, rows), ""]


def _cell(metrics: Metrics, key: tuple[str, float, str], value: Callable[[RunMetrics], float], digits: int = 2) -> str:
    m = metrics.get(key)
    return _f(None if m is None else value(m), digits)


def _title(variant: str) -> str:
    return TITLES.get(variant, variant)


def reference_bandwidths(results: Results) -> tuple[float, float]:
    """(high, low): 80 and 8 Mbps as in the paper where the sweep has them, else its widest and narrowest."""
    sweep = results.bandwidths()
    high = PAPER_MBPS if PAPER_MBPS in sweep else max(sweep)
    low = LOW_MBPS if LOW_MBPS in sweep else min(sweep)
    return high, low


def _check_cell(check: object) -> str:
    if check is None:
        return "n/a"
    mark = "yes" if check.within else f"**no** ({100 * check.miss:+.0f} %)"
    return f"{check.value:.2f} in [{check.low:.2f}, {check.high:.2f}]: {mark}"


def _load(meta: dict[str, object]) -> str:
    """The load average recorded at the end of the run (a busy machine makes timings noisy), if any."""
    load = meta.get("load_average_at_end")
    if not isinstance(load, list) or len(load) != 3:
        return ""
    return f" (load average at the end of the run: {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} over 1 / 5 / 15 min)"


def _teacher(results: Results) -> str:
    """What the labels teacher reads: generated scenes' ground truth, or a real teacher's stored labels."""
    real = [str(scene.get("preset", "")).startswith(REAL_PRESET_PREFIX) for scene in results.scenes.values()]
    if real and all(real):
        return "the labels a real teacher made of each real clip beforehand (its own cost is not paid here)"
    if any(real):
        return "each generated scene's ground truth, or the labels a real teacher made of each real clip beforehand"
    return "each scene's ground truth"


def _setup(results: Results) -> list[str]:
    meta, machine = results.meta, results.meta.get("machine", {})
    link = meta.get("link", {})
    lines = [
        "## Setup", "",
        f"- Machine: {machine.get('cpu_model', '?')}, {machine.get('cpu_count', '?')} cores{_load(meta)}. "
        "Server and edge run on the same CPU, "
        f"each with {meta.get('process_env', {}).get('OMP_NUM_THREADS', '?')} thread(s); the edge is "
        f"an x86 CPU, not a Jetson, and there is no GPU: the teacher is {_teacher(results)} (the `labels` "
        "teacher, as fast as reading a PNG) and distillation runs on the CPU.",
        "- Link: the server and the edge agent run as the real `shadowtutor serve` and `shadowtutor edge` "
        "processes in two Linux network namespaces joined by a veth pair "
        f"({link.get('server_addr', '?')} and {link.get('edge_addr', '?')}); each end shapes what it sends with "
        f"`tc tbf` (burst {link.get('tbf_burst', '?')}, latency {link.get('tbf_latency_ms', '?')} ms), so both "
        f"directions get the bandwidth; added delay (netem): {link.get('netem_delay_ms', 0)} ms.",
        "- The edge processes the video **as fast as it can** (no `--max-fps`), like the paper: FPS is frames "
        "processed per second of the agent's frame loop (its start-up and the WELCOME's weights are left out; "
        "they are shown as start-up time).",
        "- Frames are at a reduced resolution (below); bytes per frame scale with the pixel count, so a 720p run "
        "sends roughly (1280x720)/(W x H) times the frame bytes; the weight updates do not scale.",
        f"- Student every session starts from: `{meta.get('student', '?')}`; algorithm parameters: "
        f"{meta.get('algorithm_params', {})}.",
        "",
    ]
    scene_rows = [[name, s.get("preset", ""), s.get("camera", ""), s.get("category", ""), str(s.get("frames")),
                   f"{s.get('width')}x{s.get('height')}", str(s.get("cuts", []))]
                  for name, s in results.scenes.items()]
    lines += _table(["scene", "preset", "camera", "category", "frames", "size", "cuts"], scene_rows)
    variant_rows = [[_title(name), v.get("mode", ""), "`" + " ".join(v.get("edge_args", [])) + "`"]
                    for name, v in meta.get("variants", {}).items()]
    lines += _table(["variant", "agent mode", "agent codec flags"], variant_rows)
    lines += [f"The agent's codec defaults (used where a variant sets no flag; the server allowed every codec, so "
              f"the first offered was used): `{meta.get('agent_codec_defaults', '?')}`.", ""]
    link_rows = [[f"{c['mbps']:g}", f"{c['up_mbps']:.2f}", f"{c['down_mbps']:.2f}", f"{c['bytes'] / 1e6:.2f}"]
                 for c in sorted(results.links, key=lambda c: -c["mbps"])]
    rounds = max((int(c.get("rounds", 1)) for c in results.links), default=1)
    best = f", the best of {rounds} rounds" if rounds > 1 else ""
    lines += [f"Link check before each bandwidth's runs: a timed TCP transfer each way between the namespaces{best} "
              "(goodput, so a few % under the shaped rate for TCP/IP headers).", ""]
    lines += _table(["shaped (Mbps)", "up goodput (Mbps)", "down goodput (Mbps)", "MB each way"], link_rows)
    return lines


def _table3(results: Results, metrics: Metrics, high: float) -> list[str]:
    variants = results.variants()
    rows = []
    for scene, info in results.scenes.items():
        cells = []
        for v in variants:
            m = metrics.get((scene, high, v))
            cells.append("n/a" if m is None else f"{m.fps:.2f} ({m.record.loop_seconds:.1f})")
        rows.append([info.get("camera", ""), scene, *cells])
    averages = [mean_or_none([metrics[k].fps for k in metrics if k[1] == high and k[2] == v]) for v in variants]
    rows.append(["", "**average**", *(_f(a) for a in averages)])
    return [f"## Throughput at {high:g} Mbps (paper Table 3)", "",
            "Frames processed per second, frame-loop time in seconds in parentheses.", "",
            *_table(["camera", "scene", *(_title(v) for v in variants)], rows)]


def _table4(results: Results, metrics: Metrics, high: float) -> list[str]:
    variants = results.variants()
    at_high = {v: [m for k, m in metrics.items() if k[1] == high and k[2] == v] for v in variants}

    def avg(v: str, attr: str) -> str:
        value = mean_or_none([getattr(m, attr) for m in at_high[v]])
        return "n/a" if value is None else f"{value / 1e6:.4f}"

    rows = [[label, *(avg(v, attr) for v in variants)]
            for label, attr in (("to server", "up_per_key_frame"), ("to client", "down_per_key_frame"),
                                ("total (s_net)", "s_net"))]
    return [f"## Data per key frame at {high:g} Mbps (paper Table 4)", "",
            "MB per key frame (naive: every frame is one), averaged over the scenes; WebSocket messages as the "
            "agent counted them, handshake excluded. ShadowTutor's key frame goes up as the agent's default "
            "codec (see the variants table) and the update comes down as the trainable tensors only.", "",
            *_table(["direction", *(_title(v) for v in variants)], rows)]


def _table5(results: Results, metrics: Metrics, high: float) -> list[str]:
    variants = results.variants()
    rows = []
    for scene, info in results.scenes.items():
        rows.append([info.get("camera", ""), scene,
                     *(_cell(metrics, (scene, high, v), lambda m: 100 * m.key_frame_ratio) for v in variants),
                     *(_cell(metrics, (scene, high, v), lambda m: m.mbps) for v in variants)])
    avg_ratio = [mean_or_none([100 * m.key_frame_ratio for k, m in metrics.items() if k[1] == high and k[2] == v])
                 for v in variants]
    avg_mbps = [mean_or_none([m.mbps for k, m in metrics.items() if k[1] == high and k[2] == v]) for v in variants]
    rows.append(["", "**average**", *(_f(a) for a in avg_ratio), *(_f(a) for a in avg_mbps)])
    header = ["camera", "scene", *(f"key frames % {_title(v)}" for v in variants),
              *(f"Mbps {_title(v)}" for v in variants)]
    return [f"## Key frames and traffic at {high:g} Mbps (paper Table 5)", "",
            "Key-frame ratio (%) and network traffic (Mbps, both directions, payload over the frame loop).", "",
            *_table(header, rows)]


def _sweep(results: Results, metrics: Metrics, high: float, low: float, plots: dict[str, str]) -> list[str]:
    variants, sweep = results.variants(), results.bandwidths()
    lines = ["## Bandwidth sweep (paper Figure 4)", "",
             f"![FPS against bandwidth]({plots['fps']})", "",
             "FPS per scene and bandwidth; the grey band in the plot is ShadowTutor's throughput bounds (eqs. 14, "
             "15) from the components measured in the same run.", ""]
    rows = []
    for scene in results.scenes:
        for v in variants:
            rows.append([scene, _title(v), *(_cell(metrics, (scene, b, v), lambda m: m.fps, 1) for b in sweep)])
    lines += _table(["scene", "variant", *(f"{b:g} Mbps" for b in sweep)], rows)
    lines += [f"Throughput kept at {low:g} Mbps relative to {high:g} Mbps (FPS ratio):", ""]
    ratio_rows = []
    for v in variants:
        per_scene = [retention(metrics, scene, v, low, high) for scene in results.scenes]
        ratio_rows.append([_title(v), *(_f(r) for r in per_scene), _f(mean_or_none(per_scene))])
    lines += _table(["variant", *results.scenes, "mean"], ratio_rows)
    shadow = mean_or_none([retention(metrics, s, SHADOWTUTOR, low, high) for s in results.scenes])
    raw = mean_or_none([retention(metrics, s, NAIVE_RAW, low, high) for s in results.scenes])
    if shadow is not None and raw is not None:
        lines += [f"**At {low:g} Mbps ShadowTutor keeps {100 * shadow:.0f} % of its {high:g} Mbps throughput; "
                  f"naive offloading with raw frames keeps {100 * raw:.0f} %** (means over the scenes).", ""]
    return lines


def _bytes(results: Results, metrics: Metrics, high: float, plots: dict[str, str]) -> list[str]:
    variants = results.variants()
    rows = []
    for scene in results.scenes:
        for v in variants:
            m = metrics.get((scene, high, v))
            if m is None:
                continue
            r = m.record
            rows.append([scene, _title(v), f"{m.bytes_per_frame / 1e3:.2f}", f"{m.wire_bytes_per_frame / 1e3:.2f}",
                         f"{(r.handshake_bytes_sent + r.handshake_bytes_received) / 1e3:.1f}",
                         f"{m.startup_seconds:.2f}"])
    shadow = mean_or_none([m.bytes_per_frame for k, m in metrics.items() if k[1] == high and k[2] == SHADOWTUTOR])
    lines = ["## Bytes per frame", "", f"![bytes per frame against bandwidth]({plots['bytes']})", "",
             f"At {high:g} Mbps: payload kB per frame (WebSocket messages both ways, handshake excluded), kB per "
             "frame on the veth (Ethernet frames both ways during the agent's whole run: TCP/IP headers, ACKs, "
             "start-up and handshake included), the handshake (HELLO + WELCOME, kB) and the agent's start-up time "
             "(s).", "",
             *_table(["scene", "variant", "payload kB/frame", "wire kB/frame", "handshake kB", "start-up s"], rows)]
    for v in variants:
        if v == SHADOWTUTOR or shadow is None:
            continue
        other = mean_or_none([m.bytes_per_frame for k, m in metrics.items() if k[1] == high and k[2] == v])
        if other:
            saving = 1 - shadow / other
            lines.append(f"- ShadowTutor sends {100 * abs(saving):.1f} % {'fewer' if saving >= 0 else 'more'} bytes "
                         f"per frame than {_title(v)} (means over the scenes at {high:g} Mbps).")
    return [*lines, "", *_against_baseline(results, metrics, high)]


def _times_fewer(ours: float, theirs: float) -> str:
    return "n/a" if ours <= 0 else f"{theirs / ours:.2f}x"


def _against_baseline(results: Results, metrics: Metrics, high: float) -> list[str]:
    """Per scene at ``high`` Mbps: kbps per camera up and down at the scene's frame rate, ShadowTutor's and
    the baseline's (naive offloading as one H.264 stream), and how many times fewer bytes ShadowTutor sends."""
    rows = []
    for scene, info in results.scenes.items():
        ours, base = metrics.get((scene, high, SHADOWTUTOR)), metrics.get((scene, high, BASELINE))
        if ours is None or base is None:
            continue
        kbps = 8.0 * float(info.get("fps") or 0.0) / 1e3
        rows.append([scene, f"{ours.up_per_frame * kbps:.1f}", f"{ours.down_per_frame * kbps:.1f}",
                     f"{base.up_per_frame * kbps:.1f}", f"{base.down_per_frame * kbps:.1f}",
                     _times_fewer(ours.up_per_frame, base.up_per_frame),
                     _times_fewer(ours.down_per_frame, base.down_per_frame),
                     _times_fewer(ours.bytes_per_frame, base.bytes_per_frame)])
    if not rows:
        return []
    return [f"### Against {_title(BASELINE)} at {high:g} Mbps", "",
            "kbps per camera at the scene's own frame rate (payload per frame, handshake excluded) and how many "
            "times fewer bytes ShadowTutor sends than naive offloading as one H.264 stream (every frame up, its "
            "labels down).", "",
            *_table(["scene", "ShadowTutor up kbps", "ShadowTutor down kbps", "H.264 up kbps", "H.264 down kbps",
                     "x fewer up", "x fewer down", "x fewer both"], rows), ""]


def _accuracy(results: Results, metrics: Metrics) -> list[str]:
    variants, sweep = results.variants(), results.bandwidths()
    rows = [[scene, _title(v), *(_cell(metrics, (scene, b, v), lambda m: m.record.miou_percent, 1) for b in sweep)]
            for scene in results.scenes for v in variants]
    return ["## Accuracy", "",
            f"Mean per-frame mIoU (%) of every frame's label map against the teacher (here {_teacher(results)}, "
            "so naive offloading scores 100 by construction).", "",
            *_table(["scene", "variant", *(f"{b:g} Mbps" for b in sweep)], rows)]


def _components(results: Results, metrics: Metrics) -> list[str]:
    rows, fps_in, mbps_in, checked, misses = [], 0, 0, 0, []
    for (scene, mbps, variant), m in sorted(metrics.items(), key=lambda kv: (kv[0][0], -kv[0][1])):
        if variant != SHADOWTUTOR or m.latencies is None:
            continue
        lat = m.latencies
        checked += 1
        fps_in += m.fps_check.within
        mbps_in += m.mbps_check.within
        for what, check in (("FPS", m.fps_check), ("Mbps", m.mbps_check)):
            if not check.within:
                misses.append(f"- {scene} at {mbps:g} Mbps: {what} {check.value:.2f} outside "
                              f"[{check.low:.2f}, {check.high:.2f}] ({100 * check.miss:+.1f} %)")
        rows.append([scene, f"{mbps:g}", f"{1e3 * lat.t_si:.1f}", f"{1e3 * lat.t_sd:.1f}", f"{1e3 * lat.t_ti:.1f}",
                     f"{1e3 * lat.t_net:.1f}", f"{lat.s_net_bytes / 1e3:.1f}",
                     _check_cell(m.fps_check), _check_cell(m.mbps_check)])
    params = params_of(results)
    lines = [
        "## Table 1 components and the analytic bounds", "",
        "Measured per ShadowTutor run (ms; s_net in kB): t_si = the edge's time per frame not blocked on the "
        "network (decoding, student inference, key-frame encoding, installing updates); t_sd = the server's "
        "Algorithm 1 time per optimisation step; t_ti = teacher latency per key frame (queue wait included); "
        "t_net = mean update round trip minus the server's time per key frame; s_net = bytes per key frame "
        "and its update. The bounds are eqs. 14/15 (FPS) and 8/12 (Mbps) with "
        f"MIN_STRIDE {params.min_stride}, MAX_STRIDE {params.max_stride}, MAX_UPDATES {params.max_updates}.", "",
        *_table(["scene", "Mbps", "t_si", "t_sd", "t_ti", "t_net", "s_net kB", "FPS within bounds",
                 "Mbps within bounds"], rows),
        f"Within the bounds: FPS in {fps_in} of {checked} runs, Mbps in {mbps_in} of {checked} runs.", "",
    ]
    if misses:
        lines += ["Misses:", "", *misses, ""]
    return lines


def render_markdown(results: Results, plots: dict[str, str], notes: str = "", regenerate: str = "") -> str:
    """The page; ``plots`` maps ``fps`` and ``bytes`` to image links, ``regenerate`` is the report command."""
    metrics = all_metrics(results)
    high, low = reference_bandwidths(results)
    meta = results.meta
    lines = [
        "# Network benchmark: ShadowTutor against naive offloading on shaped links", "",
        f"Measured {meta.get('created', '?')} (as root, code at `{meta.get('source_revision', '?')}`) by:", "",
        "```", meta.get("command", "?"), "```", "",
    ]
    if regenerate:
        lines += ["This page is generated from the committed results file by:", "", "```", regenerate, "```", ""]
    lines += _setup(results)
    lines += _table3(results, metrics, high)
    lines += _table4(results, metrics, high)
    lines += _table5(results, metrics, high)
    lines += _sweep(results, metrics, high, low, plots)
    lines += _bytes(results, metrics, high, plots)
    lines += _accuracy(results, metrics)
    lines += _components(results, metrics)
    if notes.strip():
        lines += ["## Notes", "", notes.strip(), ""]
    return "\n".join(lines)


def write_report(results: Results, out: Path, plots_dir: Path, notes: str = "", regenerate: str = "") -> Path:
    """Write ``out`` (Markdown) and its two PNG plots into ``plots_dir``; links are relative to ``out``."""
    metrics = all_metrics(results)
    fps_path = plot_fps(results, metrics, plots_dir / FPS_PLOT)
    bytes_path = plot_bytes_per_frame(results, metrics, plots_dir / BYTES_PLOT)
    plots = {key: Path(os.path.relpath(path, out.parent)).as_posix()
             for key, path in (("fps", fps_path), ("bytes", bytes_path))}
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_markdown(results, plots, notes, regenerate))
    return out
