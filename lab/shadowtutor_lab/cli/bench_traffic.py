"""``shadowtutor bench traffic``: bytes per key frame at 720p against P-8 mIoU, per frame and weight codec."""

from __future__ import annotations

import argparse
from pathlib import Path

from shadowtutor_lab.cli.options import frame_size, invoked_command, positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "traffic",
        help="bytes per key frame at 720p and P-8 mIoU for frame / weight codec settings (the traffic budget)",
        description="Settings are FRAME[@QUALITY]/WEIGHT_CODECS[/held], e.g. jpeg@80/q8delta+zstd,f16+zstd: "
        "the weight codecs as an edge offers them; /held: the server trains on from the weights the edge holds "
        "instead of its own float weights. "
        "The uncompressed setting (raw/f32) and the agent's defaults are always run.",
    )
    p.add_argument("--scenes", nargs="+", type=Path, required=True, metavar="DIR", help="scene directories")
    p.add_argument("--settings", nargs="+", metavar="SETTING", help="settings to compare (default: a sweep)")
    p.add_argument("--frames", type=positive_int, help="first N frames of each scene (default: all)")
    p.add_argument("--size", type=frame_size, help="run the accuracy at WxH (default: each scene's size)")
    p.add_argument("--out", type=Path, default=Path("bench-traffic"), help="directory for the runs' traces")
    p.add_argument("--report", type=Path, help="write REPORT.json and REPORT.md (default: OUT/traffic_budget)")
    p.add_argument("--student", type=Path, help="student checkpoint (default: the packaged pre-trained one)")
    p.add_argument("--backend", default="auto", choices=("auto", "torch", "onnx", "reference"),
                   help="student inference backend on the edge side (default: onnx where installed)")
    p.add_argument("--threads", type=positive_int, help="torch / ONNX Runtime threads per worker (default 1)")
    p.add_argument("--jobs", type=positive_int, default=1, help="worker processes (one run = a setting on a scene)")
    p.add_argument("--no-resume", action="store_true", help="recompute runs whose traces are stored")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--note", action="append", default=[], help="a note for the report (repeatable)")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from shadowtutor_lab.evaluation.traffic import DEFAULT_SWEEP, TrafficConfig, run_traffic
    from shadowtutor_lab.evaluation.traffic_report import write_report

    config = TrafficConfig(
        scenes=tuple(args.scenes), out_dir=args.out, settings=tuple(args.settings or DEFAULT_SWEEP),
        frames=args.frames, size=args.size, student=args.student, backend=args.backend, threads=args.threads,
        workers=args.jobs, resume=not args.no_resume, progress=not args.no_progress, command=invoked_command(args),
        notes=tuple(args.note),
    )
    results = run_traffic(config)
    for setting in results["settings"]:
        mean = setting["mean"]
        print(f"{setting['label']}: {mean['key_frame_bytes_720p'] / 1000:.1f} kB per key frame at 720p "
              f"(frame {mean['frame_bytes_720p'] / 1000:.1f} + update {mean['update_bytes'] / 1000:.1f}), "
              f"P-8 mIoU {mean['miou']:.2f} ({mean['miou_difference']:+.2f}, worst "
              f"{mean['worst_miou_difference']:+.2f})")
    json_path, md_path = write_report(args.report or args.out / "traffic_budget", results)
    print(f"wrote {json_path} and {md_path}")
    return 0
