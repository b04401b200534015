"""``shadowtutor bench frame-rate``: the paper's Table 7 from two ``bench accuracy`` runs."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "frame-rate", help="P-1, P-8 and key frames of the same videos at their own and a re-sampled rate (Table 7)",
        description="Compare two 'bench accuracy' output folders scene by scene: one on videos at their own frame "
                    "rate, one on the same videos re-sampled ('scenes make --sample-fps', 'scenes make-real "
                    "--sample-fps'), made with the same student and parameters.",
    )
    p.add_argument("--full", type=Path, required=True, metavar="DIR", help="the run at the videos' own rate")
    p.add_argument("--resampled", type=Path, required=True, metavar="DIR", help="the run on the re-sampled videos")
    p.add_argument("--out", type=Path, required=True, help="the Markdown page to write")
    p.add_argument("--title", default="Frame rate: the paper's Table 7", help="the page's title")
    p.add_argument("--note", action="append", default=[], help="a note for the page (repeatable)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from shadowtutor_lab.cli.options import invoked_command
    from shadowtutor_lab.evaluation.frame_rate import FIGURES, write_frame_rate

    averages = write_frame_rate(args.full, args.resampled, args.out, args.title, args.note, invoked_command(args))
    for key, title in FIGURES:
        own, low = averages[key]
        print(f"{title}: {own:.2f} at the own rate, {low:.2f} re-sampled ({low - own:+.2f})")
    print(f"wrote {args.out}")
    return 0
