"""Session checkpoints before the answer (the earlier layout) against behind it (now), in one run: the
answer's wait, the turnaround and the bytes per update, and their ratios
(``shadowtutor_lab.stress.checkpoint_compare``).

Usage: ``python lab/scripts/checkpoint_bench.py --updates 30 --machine "AMD EPYC, 2 cores, shared"
--out docs/results/checkpoints/compare``  (writes OUT.json and OUT.md)
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import time
from pathlib import Path

from shadowtutor_lab.stress.checkpoint_compare import compare


def _markdown(result: dict, machine: str, command: str, measured: str) -> str:
    modes, ratios = result["modes"], result["ratios"]
    lines = [
        "# Session checkpoints: before the answer (format 1) against behind it (format 2)",
        "",
        f"Measured {measured} on {machine}. One session of the default student ({result['trainable_parameters']:,} "
        f"trainable parameters), {result['size']} key frames (random frames and labels, every step of Algorithm 1 "
        f"taken), {result['weight_codec']} / {result['delta_codec']}, {result['updates']} updates per mode, the "
        "two modes in turns key frame by key frame.",
        "",
        "| mode | bytes per update | answer waits after training, ms (mean / p50 / p95) "
        "| turnaround, ms (mean / p50 / p95) |",
        "|---|---|---|---|",
    ]
    for mode, label in (
        ("before", "before the answer, format 1 (earlier release)"),
        ("behind", "behind the answer, format 2 (now)"),
    ):
        m = modes[mode]
        wait, turn = m["answer_wait_ms"], m["turnaround_ms"]
        lines.append(
            f"| {label} | {m['bytes_per_update']:,.0f} | {wait['mean']:.1f} / {wait['p50']:.1f} / "
            f"{wait['p95']:.1f} | {turn['mean']:.0f} / {turn['p50']:.0f} / {turn['p95']:.0f} |"
        )
    write = result["write_behind_ms"]
    lines += [
        "",
        f"Ratios (behind / before): bytes per update **{ratios['bytes_per_update']:.3f}**, turnaround mean "
        f"**{ratios['turnaround_mean']:.3f}**, p50 **{ratios['turnaround_p50']:.3f}**. The writer's encode and "
        f"write, off the answer: {write['mean']:.1f} ms mean, {write['p95']:.1f} ms p95 "
        f"({result['written_behind']} checkpoints written).",
        "",
        "Command:",
        "",
        "```",
        command,
        "```",
        "",
    ]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument(
        "--machine", required=True, help="the machine, in words (named in the report)"
    )
    parser.add_argument("--out", type=Path, required=True, help="writes OUT.json and OUT.md")
    args = parser.parse_args()
    measured = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    result = compare(updates=args.updates)
    command = "python " + shlex.join(["lab/scripts/checkpoint_bench.py", *sys.argv[1:]])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(
        json.dumps(
            {"machine": args.machine, "measured": measured, "command": command, **result}, indent=2
        )
        + "\n"
    )
    args.out.with_suffix(".md").write_text(_markdown(result, args.machine, command, measured))
    print(json.dumps(result["ratios"], indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
