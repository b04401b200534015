"""``shadowtutor bench``: the benchmarks, one sub-subcommand each.

A benchmark lives in its own module with ``register(subparsers)`` (like a top-level
command); adding one is adding its module's name to :data:`BENCH_MODULES`.
"""

from __future__ import annotations

import argparse
import importlib

BENCH_MODULES = (
    "shadowtutor.cli.bench_accuracy",
    "shadowtutor.cli.bench_frame_rate",
    "shadowtutor.cli.bench_student",
    "shadowtutor.cli.bench_network",
    "shadowtutor.cli.bench_traffic",
    "shadowtutor.cli.bench_load",
    "shadowtutor.cli.bench_server",
    "shadowtutor.cli.bench_change_based",
    "shadowtutor.cli.bench_regions",
)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("bench", help="benchmarks: accuracy (the paper's tables), student inference, ...")
    benchmarks = p.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for name in BENCH_MODULES:
        importlib.import_module(name).register(benchmarks)
