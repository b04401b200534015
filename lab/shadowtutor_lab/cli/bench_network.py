"""``shadowtutor bench network`` (the shaped-link sweep, as root) and ``shadowtutor bench network-report``."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from shadowtutor_lab.cli.options import frame_size, invoked_command, positive_int

if TYPE_CHECKING:
    from shadowtutor_lab.netbench.results import Results

DEFAULT_OUT = Path("runs/bench-network")
DEFAULT_WORK = DEFAULT_OUT / "work"


def bandwidth_list(text: str) -> tuple[float, ...]:
    """``90,80,8`` -> (90.0, 80.0, 8.0), each > 0."""
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated Mbps such as 90,80,8, got {text!r}") from None
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"bandwidths must be positive Mbps, got {text!r}")
    return values


def register(subparsers: argparse._SubParsersAction) -> None:
    from shadowtutor_lab.netbench.shaping import PAPER_BANDWIDTHS_MBPS
    from shadowtutor_lab.netbench.variants import VARIANT_NAMES

    p = subparsers.add_parser(
        "network",
        help="(root) real server and edge agent in two network namespaces over a tc-shaped veth link: "
        "ShadowTutor vs naive offloading (raw, JPEG) across a bandwidth sweep",
    )
    p.add_argument("--scenes", nargs="+", type=Path, required=True, metavar="DIR", help="scene directories")
    p.add_argument("--bandwidths", type=bandwidth_list, default=PAPER_BANDWIDTHS_MBPS, metavar="MBPS,...",
                   help="Mbps of each direction (default: the paper's 90,80,60,40,20,12,8)")
    p.add_argument("--frames", type=positive_int, help="first N frames of each scene (default: all)")
    p.add_argument("--size", type=frame_size, help="the agent resizes frames to WxH (default: each scene's size)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT,
                   help=f"results.json, results.md and plots go here (default {DEFAULT_OUT})")
    p.add_argument("--work-dir", type=Path, default=DEFAULT_WORK,
                   help=f"per-run label maps, summaries, logs (default {DEFAULT_WORK})")
    p.add_argument("--variants", default=",".join(VARIANT_NAMES),
                   help=f"comma-separated, from {', '.join(VARIANT_NAMES)} (default: all)")
    p.add_argument("--frame-codecs", help="ShadowTutor's key-frame codecs, as the agent's --frame-codecs")
    p.add_argument("--weight-codecs", help="ShadowTutor's weight codecs, as the agent's --weight-codecs")
    p.add_argument("--jpeg-quality", type=positive_int, help="JPEG quality of ShadowTutor and naive-jpeg frames")
    p.add_argument("--student", type=Path, help="student checkpoint for the server (default: its packaged one)")
    p.add_argument("--tbf-latency-ms", type=float, default=100.0, help="tbf queue bound, ms (default 100)")
    p.add_argument("--delay-ms", type=float, default=0.0, help="netem one-way delay per direction (default 0: off)")
    p.add_argument("--change-based", action="store_true",
                   help="ShadowTutor edges label change-based (shadowtutor edge --change-based)")
    p.add_argument("--resume", action="store_true", help="keep the runs already in OUT/results.json")
    p.set_defaults(handler=run)

    r = subparsers.add_parser("network-report", help="regenerate the network report (Markdown, plots) from results")
    r.add_argument("--results", type=Path, required=True, help="results.json of `bench network`")
    r.add_argument("--out", type=Path, default=Path("docs/results.md"), help="Markdown file (default docs/results.md)")
    r.add_argument("--plots-dir", type=Path, help="PNG plots (default: the results file's directory)")
    r.add_argument("--notes", type=Path, help="Markdown appended as Notes (default: notes.md beside the results)")
    r.set_defaults(handler=report)


def run(args: argparse.Namespace) -> int:
    from shadowtutor_lab.netbench.runner import NetworkBenchConfig, run_network_bench
    from shadowtutor_lab.netbench.variants import build_variants

    variants = build_variants(tuple(v.strip() for v in args.variants.split(",") if v.strip()),
                              args.frame_codecs, args.jpeg_quality, args.weight_codecs)
    config = NetworkBenchConfig(
        scenes=tuple(args.scenes), out_dir=args.out, work_dir=args.work_dir,
        bandwidths=args.bandwidths, frames=args.frames, size=args.size, variants=variants,
        student=args.student, latency_ms=args.tbf_latency_ms, delay_ms=args.delay_ms, resume=args.resume,
        command=invoked_command(args), change_based=args.change_based,
    )
    results = run_network_bench(config)
    results_path = args.out / "results.json"
    out = _write(results, results_path, args.out / "results.md", args.out, None)
    print(f"wrote {results_path} and {out}; regenerate the report with: "
          f"shadowtutor bench network-report --results {results_path} --out docs/results.md")
    return 0


def report(args: argparse.Namespace) -> int:
    from shadowtutor_lab.netbench.results import Results

    results = Results.load(args.results)
    out = _write(results, args.results, args.out, args.plots_dir or args.results.parent, args.notes)
    print(f"wrote {out}")
    return 0


def _write(results: Results, results_path: Path, out: Path, plots_dir: Path, notes: Path | None) -> Path:
    from shadowtutor_lab.netbench.report import write_report

    if notes is not None and not notes.is_file():
        raise FileNotFoundError(f"no notes file at {notes}")
    notes = notes if notes is not None else results_path.parent / "notes.md"
    text = notes.read_text() if notes.is_file() else ""
    command = shlex.join(["shadowtutor", "bench", "network-report", "--results", str(results_path),
                          "--out", str(out), "--plots-dir", str(plots_dir)])
    return write_report(results, out, plots_dir, text, command)
