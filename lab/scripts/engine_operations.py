"""How many operations the batched distillation engine issues: a device-free count of its host work.

On a GPU each operation that computes is a kernel launch, and the engine's time per batch at small frame
sizes is the host's (Python, ``vmap``, autograd, launches: docs/design/batched_distillation.md). This
script counts, with a ``TorchDispatchMode`` on the CPU, the aten operations of :func:`distill_batch`:

- per batch of ``--sessions`` sessions, THRESHOLD 0.999 and MAX_UPDATES 8 (every step taken), for fresh
  sessions (no Adam state yet, as ``engine_variants.py`` times them) and for sessions that trained once;
- per step: a batch at MAX_UPDATES 8 less one at 7.

"Compute" leaves out views and allocations (no kernel). Per tail (as written, fused) and convolution
(grouped, matmul). Frames are ``--size`` noise with block labels (``engine_inputs.key_frames``); the
counts do not depend on the frame size.

Usage: ``python lab/scripts/engine_operations.py [--sessions 64] [--size 64x64] [--out R.json]``
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any
from unittest import mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from shadowtutor.algorithms import batched_distill
from shadowtutor.algorithms.batched_distill import (
    CONVOLUTIONS,
    Convolution,
    KeyFrameJob,
    distill_batch,
    front_fingerprint,
)
from shadowtutor.algorithms.distill import Distiller
from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.classes import LVS_CLASSES, background_index
from shadowtutor.models.student import StudentNet
from shadowtutor_lab.cli.options import frame_size, script_command
from shadowtutor_lab.evaluation.engine_inputs import key_frames

NO_KERNEL = frozenset({
    "aten.view.default", "aten._unsafe_view.default", "aten.permute.default", "aten.detach.default",
    "aten.unsqueeze.default", "aten.squeeze.dim", "aten.squeeze.dims", "aten.select.int", "aten.slice.Tensor",
    "aten.expand.default", "aten.transpose.int", "aten.t.default", "aten.alias.default", "aten.as_strided.default",
    "aten.split.Tensor", "aten.split_with_sizes.default", "aten.unbind.int", "aten.diagonal.default",
    "aten.lift_fresh.default", "aten.empty_like.default", "aten.empty.memory_format", "aten.empty_strided.default",
})


class OperationCount(TorchDispatchMode):
    """Counts the aten operations dispatched while open, by name."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.counts[str(func)] += 1
        return func(*args, **(kwargs or {}))

    def totals(self) -> dict[str, int]:
        """All operations, and those that compute (launch a kernel on a GPU)."""
        return {"all": sum(self.counts.values()),
                "compute": sum(n for name, n in self.counts.items() if name not in NO_KERNEL)}


def count_batch(template: StudentNet, inputs: list[Any], fuse_tail: bool, convolution: Convolution,
                max_updates: int, trained_once: bool) -> dict[str, int]:
    """The operations of one batch (every session's key frame of ``inputs``), its sessions fresh or trained once."""
    params = AlgorithmParams(threshold=0.999, max_updates=max_updates)
    background = background_index(LVS_CLASSES)
    distillers = [Distiller(copy.deepcopy(template), params, background, "cpu", fuse_tail=fuse_tail) for _ in inputs]
    for distiller in distillers:
        front_fingerprint(distiller)  # cached, as a server session's is after its first key frame

    def jobs() -> list[KeyFrameJob]:
        return [KeyFrameJob.prepare(d, f, lab) for d, (f, lab) in zip(distillers, inputs, strict=True)]

    if trained_once:
        distill_batch(jobs(), convolution)
    batch = jobs()
    with OperationCount() as counted:
        distill_batch(batch, convolution)
    return counted.totals()


def measure(sessions: int, size: tuple[int, int], seed: int = 0) -> list[dict[str, Any]]:
    """One row per tail and convolution: the batch's operations (fresh, trained once) and one step's."""
    torch.manual_seed(seed)
    template = StudentNet(num_classes=len(LVS_CLASSES))
    inputs = key_frames(sessions, size[0], size[1], seed)
    rows = []
    # as on a GPU: every batch takes MAX_UPDATES steps
    with mock.patch.object(batched_distill, "stops_early_on_host", lambda device: False):
        for fuse_tail in (False, True):
            for convolution in CONVOLUTIONS:
                fresh = count_batch(template, inputs, fuse_tail, convolution, 8, trained_once=False)
                trained = count_batch(template, inputs, fuse_tail, convolution, 8, trained_once=True)
                seven = count_batch(template, inputs, fuse_tail, convolution, 7, trained_once=True)
                rows.append({
                    "tail": "fused" if fuse_tail else "written", "convolution": convolution,
                    "batch_fresh": fresh, "batch_trained": trained,
                    "step": {kind: trained[kind] - seven[kind] for kind in ("all", "compute")},
                })
    return rows


def lines(rows: list[dict[str, Any]], sessions: int) -> list[str]:
    out = [f"aten operations of the batched engine, {sessions} sessions, 8 steps (compute / all):",
           "| tail | convolution | batch, fresh sessions | batch, sessions trained once | one step |",
           "|---|---|---|---|---|"]
    for row in rows:
        cells = [f"{row[k]['compute']:,} / {row[k]['all']:,}" for k in ("batch_fresh", "batch_trained", "step")]
        out.append(f"| {row['tail']} | {row['convolution']} | " + " | ".join(cells) + " |")
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=64, help="sessions per batch (default 64)")
    parser.add_argument("--size", type=frame_size, default=(64, 64), help="frame size WIDTHxHEIGHT (default 64x64)")
    parser.add_argument("--out", type=Path, help="results JSON; the Markdown table goes beside it (same stem)")
    args = parser.parse_args(argv)
    if args.sessions < 2:
        parser.error("--sessions must be at least 2")
    rows = measure(args.sessions, args.size)
    table = lines(rows, args.sessions)
    print("\n".join(table))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"command": script_command(__file__, argv), "torch": torch.__version__,
                                        "sessions": args.sessions, "rows": rows}, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(
            "\n".join(["# Operations of the batched engine", "", "```", script_command(__file__, argv), "```", "",
                       *table]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
