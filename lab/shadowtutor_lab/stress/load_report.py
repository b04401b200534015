"""The report of a load run: PREFIX.json (everything), PREFIX.md (tables) and PREFIX.png (memory, turnarounds)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shadowtutor_lab.evaluation.figures import png_figure

MIB = 1024 * 1024
MAX_SAMPLE_ROWS = 40  # the Markdown table thins the memory samples to about this many rows


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / MIB:.1f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _steps(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _codes(errors: dict[str, int]) -> str:
    return ", ".join(f"{code} {n}" for code, n in errors.items()) or "none"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def thinned(samples: Sequence[dict[str, Any]], rows: int = MAX_SAMPLE_ROWS) -> list[dict[str, Any]]:
    """About ``rows`` samples evenly spaced, always with the first and the last."""
    if len(samples) <= rows:
        return list(samples)
    step = (len(samples) - 1) / (rows - 1)
    return [samples[round(i * step)] for i in range(rows)]


def title(results: dict[str, Any]) -> str:
    c = results["config"]
    width, height = c["size"]
    return (f"Load: {c['edges']} edges x {c['minutes']:g} min at {c['rate']:g} key frames/s each, "
            f"{width}x{height}, {c['mode']} mode")


def markdown(results: dict[str, Any], plot_name: str | None) -> str:
    totals, turnaround, memory = results["totals"], results["turnaround"], results["memory"]
    server, machine = results["server"], results["machine"]
    problems = results["problems"]
    lines = [f"# {title(results)}", ""]
    lines += ["**Passed**: no errors, every key frame answered, no disconnects, versions agreed." if not problems
              else "**Failed**:", *[f"- {p}" for p in problems], ""]
    lines += [f"Command: `{results['command']}`", "", f"Started {results['started_at']}; load ran "
              f"{results['duration_s']:g} s. Server: {server['url']} "
              f"({'started by the command' if server['local'] else 'given'}).", ""]
    for note in results["config"].get("notes", ()):
        lines += [note, ""]
    lines += ["## Key frames", ""]
    lines += _table(
        ["sent", "answered", "unanswered", "rate (/s, all edges)", "errors by code", "disconnects", "resyncs",
         "full updates answering key frames", "MB sent", "MB received"],
        [[totals["sent"], totals["answered"], totals["unanswered"], f"{totals['rate_per_s']:.2f}",
          _codes(totals["errors"]), totals["disconnects"], totals["resyncs"], totals["full_answers"],
          f"{totals['bytes_sent'] / 1e6:.1f}", f"{totals['bytes_received'] / 1e6:.1f}"]],
    )
    lines += ["", "## Turnaround", "", "From handing a key frame to the WebSocket to receiving its UPDATE (or "
              "LABELS), in ms; steps: the distillation steps the UPDATEs report (Algorithm 1 stops early once the "
              "student passes the threshold).", ""]
    header = ["edge", "sent", "answered", "rate (/s)", "mean", "p50", "p95", "p99", "max", "steps (mean)",
              "errors", "disconnects"]
    rows = [["**all**", totals["sent"], totals["answered"], f"{totals['rate_per_s']:.2f}",
             *(_ms(turnaround[k]) for k in ("mean_ms", "p50_ms", "p95_ms", "p99_ms", "max_ms")),
             _steps(totals["mean_steps"]), _codes(totals["errors"]), totals["disconnects"]]]
    for e in results["edges"]:
        t = e["turnaround"]
        rows.append([e["edge_id"], e["sent"], e["answered"], f"{e['rate_per_s']:.2f}",
                     *(_ms(t[k]) for k in ("mean_ms", "p50_ms", "p95_ms", "p99_ms", "max_ms")),
                     _steps(e["mean_steps"]), _codes(e["errors"]), e["disconnects"]])
    lines += _table(header, rows)
    lines += ["", "## Server memory", ""]
    growth = memory["growth"]
    source = {"rss_bytes": "VmRSS of the server process (/proc)",
              "metrics_rss_bytes": "the server's process_resident_memory_bytes"}.get(memory["source"], "none")
    lines += [f"Measured: {source}, every {results['config']['interval']:g} s. Idle before the load "
              f"{_mib(memory['idle_bytes'])} MiB, peak during it {_mib(memory['peak_bytes'])} MiB, after the "
              f"cameras closed {_mib(memory['after_bytes'])} MiB; sessions at most {memory['sessions_max']}, "
              f"after {memory['sessions_after']}.", ""]
    if growth is not None:
        lines += [f"Growth from the first to the last quarter of the load (means): "
                  f"{_mib(growth['first_quarter_bytes'])} -> {_mib(growth['last_quarter_bytes'])} MiB, "
                  f"**{growth['growth_bytes'] / MIB:+.1f} MiB** ({100 * growth['growth_fraction']:+.1f}%).", ""]
    if plot_name is not None:
        lines += [f"![server memory and turnarounds]({plot_name})", ""]
    lines += _table(["t (s)", "RSS (MiB)", "metrics RSS (MiB)", "sessions", "load average (1 min)"],
                    [[f"{s['t']:.1f}", _mib(s["rss_bytes"]), _mib(s["metrics_rss_bytes"]),
                      "-" if s["sessions"] is None else s["sessions"],
                      "-" if s.get("load1") is None else f"{s['load1']:.2f}"] for s in thinned(memory["samples"])])
    lines += ["", f"({len(memory['samples'])} samples in the JSON; the cameras connected from "
              f"t = {results['connect_at_s']:.1f}, sent from 0 to {results['duration_s']:g} and then closed.)", ""]
    lines += ["## Server settings", ""]
    terms = server.get("session_terms") or {}
    if terms:
        lines += [f"Session terms: frames {terms['frame_codec']}, weights {terms['weight_codec']}, deltas "
                  f"{terms['delta_codec']}; algorithm {json.dumps(terms['params'])}.", ""]
    lines += [f"Ready: {json.dumps(server['readyz'])}.", ""]
    if server["settings"] is not None:
        shown = {k: v for k, v in server["settings"].items() if v not in (None, {}, [])}
        lines += ["Settings of the local server: " + ", ".join(f"`{k}={v}`" for k, v in shown.items()) + ".", ""]
    lines += ["## Machine", ""]
    lines += [f"{machine['cpu_model']}, {machine['cpu_count']} CPUs; {machine['platform']}; Python "
              f"{machine['python']}, torch {machine['torch']}; load average (1/5/15 min) before "
              f"{_loads(machine['load_average_before'])}, after {_loads(machine['load_average_after'])}.", ""]
    return "\n".join(lines)


def _loads(values: Sequence[float]) -> str:
    return "/".join(f"{v:.2f}" for v in values)


def plot(results: dict[str, Any], path: Path) -> Path:
    """Server memory (and sessions) over time above, every key frame's turnaround below."""
    memory, duration = results["memory"], results["duration_s"]
    samples = memory["samples"]
    with png_figure(path, 72, nrows=2, ncols=1, figsize=(9, 6), sharex=True) as (_, (top, bottom)):
        for key, label, colour in (("rss_bytes", "RSS (/proc)", "tab:blue"),
                                   ("metrics_rss_bytes", "RSS (/metrics)", "tab:orange")):
            points = [(s["t"], s[key] / MIB) for s in samples if s[key] is not None]
            if points:
                top.plot(*zip(*points, strict=True), lw=1, color=colour, label=label)
        top.set_ylabel("server memory (MiB)")
        sessions = [(s["t"], s["sessions"]) for s in samples if s["sessions"] is not None]
        if sessions:
            twin = top.twinx()
            twin.step(*zip(*sessions, strict=True), where="post", lw=0.8, color="tab:gray", label="sessions")
            twin.set_ylabel("sessions")
            twin.set_ylim(0, max(1, max(n for _, n in sessions)) * 1.2)
            twin.legend(loc="lower right", fontsize="small")
        top.legend(loc="upper left", fontsize="small")
        top.set_title(title(results))
        for axis in (top, bottom):
            axis.axvspan(0, duration, color="tab:green", alpha=0.06, lw=0)
        columns = results["key_frames"]["columns"]
        rows = [dict(zip(columns, row, strict=True)) for row in results["key_frames"]["rows"]]
        answered = [(r["sent_at_s"], r["turnaround_ms"]) for r in rows if r["turnaround_ms"] is not None]
        if answered:
            bottom.plot(*zip(*answered, strict=True), ".", ms=2, color="tab:blue", label="answered")
        lost = [r["sent_at_s"] for r in rows if r["turnaround_ms"] is None]
        if lost:
            bottom.plot(lost, [0] * len(lost), "x", color="tab:red", label="unanswered")
        bottom.set_ylabel("turnaround (ms)")
        loads = [(s["t"], s["load1"]) for s in samples if s.get("load1") is not None]
        if loads:
            twin = bottom.twinx()
            twin.plot(*zip(*loads, strict=True), lw=0.8, color="tab:gray", label="machine load (1 min)")
            twin.set_ylabel("load average")
            twin.set_ylim(0, None)
            twin.legend(loc="upper right", fontsize="small")
        bottom.set_xlabel("seconds since the load started (shaded: the load)")
        bottom.legend(loc="upper left", fontsize="small")
    return path


def write_report(prefix: Path, results: dict[str, Any]) -> tuple[Path, Path, Path]:
    """Write PREFIX.json, PREFIX.png and PREFIX.md (which shows the PNG); returns their paths."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    json_path, md_path, png_path = (prefix.with_name(prefix.name + ext) for ext in (".json", ".md", ".png"))
    json_path.write_text(json.dumps(results, indent=1, default=str) + "\n")
    plot(results, png_path)
    md_path.write_text(markdown(results, png_path.name) + "\n")
    return json_path, md_path, png_path
