"""``shadowtutor bench``: the benchmarks, one sub-subcommand each.

A benchmark lives in its own module with ``register(subparsers)`` (like a top-level
command); adding one is adding its module's name to :data:`BENCH_MODULES`.
"""

from __future__ import annotations

import argparse
import importlib

BENCH_MODULES = (
    "shadowtutor_lab.cli.bench_accuracy",
    "shadowtutor_lab.cli.bench_frame_rate",
    "shadowtutor_lab.cli.bench_student",
    "shadowtutor_lab.cli.bench_network",
    "shadowtutor_lab.cli.bench_traffic",
    "shadowtutor_lab.cli.bench_key_frame_scale",
    "shadowtutor_lab.cli.bench_key_frame_encoder",
    "shadowtutor_lab.cli.bench_load",
    "shadowtutor_lab.cli.bench_server",
    "shadowtutor_lab.cli.bench_change_based",
    "shadowtutor_lab.cli.bench_regions",
    "shadowtutor_lab.cli.bench_auth",
    "shadowtutor_lab.cli.bench_fleet",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bench", help="benchmarks: accuracy (the paper's tables), student inference, ...")
    benchmarks = p.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for name in BENCH_MODULES:
        importlib.import_module(name).register(benchmarks)
