"""Session checkpoints before the answer (the earliest layout), behind it every version, and journaled
with a snapshot every ``--every`` versions (now), in one run: the answer's wait, the turnaround and the
bytes per update, and their ratios (``shadowtutor_lab.stress.checkpoint_compare``).

Usage: ``python lab/scripts/checkpoint_bench.py --updates 48 --every 16 --machine "AMD EPYC, 2 cores"
--out docs/results/checkpoints/journal``  (writes OUT.json and OUT.md)
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
        "# Session checkpoints: before the answer (format 1), behind it (format 2), journaled",
        "",
        f"Measured {measured} on {machine}. One session of the default student ({result['trainable_parameters']:,} "
        f"trainable parameters), {result['size']} key frames (random frames and labels, every step of Algorithm 1 "
        f"taken), {result['weight_codec']} / {result['delta_codec']}, {result['updates']} updates per mode, the "
        f"three modes in turns key frame by key frame; the journaled mode snapshots every {result['every']} "
        f"versions ({result['snapshots']} snapshots).",
        "",
        "| mode | bytes per update | answer waits after training, ms (mean / p50 / p95) "
        "| turnaround, ms (mean / p50 / p95) |",
        "|---|---|---|---|",
    ]
    for mode, label in (
        ("before", "every version before the answer, format 1 (earliest release)"),
        ("behind", "every version behind the answer, format 2 (earlier release)"),
        ("journal", f"journal entry before the answer, snapshot every {result['every']} behind it (now)"),
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
        "Ratios to format 1 before the answer (bytes per update; turnaround mean, p50):",
        "",
        f"- format 2 behind the answer: **{ratios['behind_bytes_per_update']:.3f}**; "
        f"{ratios['behind_turnaround_mean']:.3f}, {ratios['behind_turnaround_p50']:.3f}",
        f"- journaled: **{ratios['journal_bytes_per_update']:.3f}**; "
        f"**{ratios['journal_turnaround_mean']:.3f}**, {ratios['journal_turnaround_p50']:.3f}",
        "",
        f"A journal entry: {result['journal_entry_bytes']['mean']:,.0f} bytes mean. The format-2 writer's encode "
        f"and write, off the answer: {write['mean']:.1f} ms mean, {write['p95']:.1f} ms p95 "
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
    parser.add_argument("--updates", type=int, default=48)
    parser.add_argument("--every", type=int, default=16, help="versions between snapshots (journaled mode)")
    parser.add_argument(
        "--machine", required=True, help="the machine, in words (named in the report)"
    )
    parser.add_argument("--out", type=Path, required=True, help="writes OUT.json and OUT.md")
    args = parser.parse_args()
    measured = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    result = compare(updates=args.updates, every=args.every)
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
