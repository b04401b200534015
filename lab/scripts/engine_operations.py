"""How many operations the batched distillation engine issues: a device-free count of its host work.

On a GPU each operation that computes is a kernel launch, and the engine's time per batch at small frame
sizes is the host's (Python, autograd, launches: docs/design/batched_distillation.md). This
script counts, with a ``TorchDispatchMode`` on the CPU, the aten operations of :func:`distill_batch`:

- per batch of ``--sessions`` sessions, THRESHOLD 0.999 and MAX_UPDATES 8 (every step taken), for fresh
  sessions (no Adam state yet, as ``engine_variants.py`` times them) and for sessions that trained once;
- per step: a batch at MAX_UPDATES 8 less one at 7.

"Compute" leaves out views and allocations (no kernel). Per tail (as written, fused) and convolution
(grouped, matmul). Frames are ``--size`` noise with block labels (``engine_inputs.key_frames``); the
counts do not depend on the frame size.

The device's work per key frame, which does depend on the frame size (the batch of sessions trained once,
8 steps, divided by its sessions): the bytes every computing operation reads and writes (each tensor argument
and result, counted by the memory it spans: a broadcast dimension once), torch's ``FlopCounterMode`` FLOPs (a
grouped convolution's weight gradient counted once, not once per group), the operations that move the most
bytes, and the roofline of a key frame on a GPU of ``--bandwidth`` GB/s and ``--peak`` TFLOP/s (the defaults:
an H100 SXM's 3,350 and its 67 float32 TFLOP/s without tensor cores), the sum over operations of the longer
of their bytes over the bandwidth and their FLOPs over the peak (each operation's calls summed). A lower bound
on the device time of these operations, however well each kernel runs; unfused, as the engine issues them (a
kernel that kept a result in cache for the next would move less).

Usage: ``python lab/scripts/engine_operations.py [--sessions 64] [--size 64x64] [--out R.json]``
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from unittest import mock

import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import FlopCounterMode, conv_backward_flop

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


def grouped_convolution_backward_flops(
    grad_out_shape: list[int], x_shape: list[int], w_shape: list[int], bias: Any, stride: Any, padding: Any,
    dilation: Any, transposed: bool, output_padding: Any, groups: int, output_mask: list[bool], out_shape: Any,
    **kwargs: Any,
) -> int:
    """torch's FLOPs of ``aten.convolution_backward`` with the weight gradient of a grouped convolution counted
    once: torch's formula counts it as if every input channel met every output channel (``groups`` times too many;
    the engine's per-session convolutions are one group per session)."""
    args = (grad_out_shape, x_shape, w_shape, bias, stride, padding, dilation, transposed, output_padding, groups)
    formula = getattr(conv_backward_flop, "__wrapped__", conv_backward_flop)  # on shapes, not tensors
    grad_input = formula(*args, [output_mask[0], False, False], out_shape=out_shape)
    grad_weight = formula(*args, [False, output_mask[1], False], out_shape=out_shape)
    return grad_input + grad_weight // groups


def spanned_bytes(tensor: torch.Tensor) -> int:
    """The bytes of memory ``tensor`` spans: its elements, a broadcast (stride 0) dimension counted once."""
    elements = 1
    for size, stride in zip(tensor.shape, tensor.stride(), strict=True):
        if stride != 0:
            elements *= size
    return elements * tensor.element_size()


class OperationCount(TorchDispatchMode):
    """Counts the aten operations dispatched while open, by overload, and with ``work``, summed per operation
    (``aten.mm``), the bytes of the tensor arguments and results of those that compute (not in
    :data:`NO_KERNEL`) and the FLOPs (``FlopCounterMode``)."""

    def __init__(self, work: bool = True) -> None:
        super().__init__()
        self.counts: Counter[str] = Counter()
        self.bytes: Counter[str] = Counter()
        self.work = work
        self.flops = FlopCounterMode(
            display=False, custom_mapping={torch.ops.aten.convolution_backward: grouped_convolution_backward_flops})

    def __enter__(self) -> OperationCount:
        if self.work:
            self.flops.__enter__()
        return cast(OperationCount, super().__enter__())

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        if self.work:
            self.flops.__exit__(*exc)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        name = str(func)
        self.counts[name] += 1
        result = func(*args, **(kwargs or {}))
        if self.work and name not in NO_KERNEL:
            tensors = [t for t in pytree.tree_leaves((args, kwargs, result)) if isinstance(t, torch.Tensor)]
            self.bytes[str(func.overloadpacket)] += sum(spanned_bytes(t) for t in tensors)
        return result

    def totals(self) -> dict[str, int]:
        """All operations, and those that compute (launch a kernel on a GPU)."""
        return {"all": sum(self.counts.values()),
                "compute": sum(n for name, n in self.counts.items() if name not in NO_KERNEL)}


@dataclass(frozen=True)
class Roofline:
    """A GPU's memory bandwidth (bytes/s) and arithmetic peak (FLOP/s)."""

    bandwidth: float
    peak: float


def traffic(counted: OperationCount, key_frames: int, roofline: Roofline, largest: int = 5) -> dict[str, Any]:
    """Per key frame of a batch of ``key_frames``: bytes moved, GFLOP, the ``largest`` operations by bytes, and the
    roofline's lower bound on the device time (each operation, its calls summed, at the longer of its bytes over
    the bandwidth and its FLOPs over the peak; then summed over operations)."""
    flops = {str(op): count for op, count in counted.flops.get_flop_counts().get("Global", {}).items()}
    names = set(counted.bytes) | set(flops)
    seconds = sum(max(counted.bytes[n] / roofline.bandwidth, flops.get(n, 0) / roofline.peak) for n in names)
    ranked = counted.bytes.most_common(largest)
    return {"gb_per_key_frame": sum(counted.bytes.values()) / key_frames / 1e9,
            "gflop_per_key_frame": counted.flops.get_total_flops() / key_frames / 1e9,
            "roofline_ms_per_key_frame": 1000 * seconds / key_frames,
            "largest": [[name, n / key_frames / 1e9] for name, n in ranked]}


def count_batch(template: StudentNet, inputs: list[Any], fuse_tail: bool, convolution: Convolution,
                max_updates: int, trained_once: bool, work: bool = False) -> OperationCount:
    """The operations of one batch (every session's key frame of ``inputs``), its sessions fresh or trained once;
    with ``work``, their bytes and FLOPs too (:class:`OperationCount`)."""
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
    with OperationCount(work) as counted:
        distill_batch(batch, convolution)
    return counted


def measure(sessions: int, size: tuple[int, int], roofline: Roofline, seed: int = 0) -> list[dict[str, Any]]:
    """One row per tail and convolution: the batch's operations (fresh, trained once), one step's, and the
    :func:`traffic` of a key frame in the batch trained once."""
    torch.manual_seed(seed)
    template = StudentNet(num_classes=len(LVS_CLASSES))
    inputs = key_frames(sessions, size[0], size[1], seed)
    rows = []
    # as on a GPU: every batch takes MAX_UPDATES steps
    with mock.patch.object(batched_distill, "stops_early_on_host", lambda device: False):
        for fuse_tail in (False, True):
            for convolution in CONVOLUTIONS:
                fresh = count_batch(template, inputs, fuse_tail, convolution, 8, trained_once=False).totals()
                counted = count_batch(template, inputs, fuse_tail, convolution, 8, trained_once=True, work=True)
                trained = counted.totals()
                seven = count_batch(template, inputs, fuse_tail, convolution, 7, trained_once=True).totals()
                rows.append({
                    "tail": "fused" if fuse_tail else "written", "convolution": convolution,
                    "batch_fresh": fresh, "batch_trained": trained,
                    "step": {kind: trained[kind] - seven[kind] for kind in ("all", "compute")},
                    "traffic": traffic(counted, len(inputs), roofline),
                })
    return rows


def lines(rows: list[dict[str, Any]], sessions: int, size: tuple[int, int], roofline: Roofline) -> list[str]:
    out = [f"aten operations of the batched engine, {sessions} sessions, 8 steps (compute / all):",
           "| tail | convolution | batch, fresh sessions | batch, sessions trained once | one step |",
           "|---|---|---|---|---|"]
    for row in rows:
        cells = [f"{row[k]['compute']:,} / {row[k]['all']:,}" for k in ("batch_fresh", "batch_trained", "step")]
        out.append(f"| {row['tail']} | {row['convolution']} | " + " | ".join(cells) + " |")
    out += ["", f"the device's work per {size[0]}x{size[1]} key frame (8 steps) and its roofline at "
                f"{roofline.bandwidth / 1e9:,.0f} GB/s and {roofline.peak / 1e12:,.0f} TFLOP/s:",
            "| tail | convolution | GB | GFLOP | roofline ms | most bytes (GB) |", "|---|---|---|---|---|---|"]
    for row in rows:
        work = row["traffic"]
        largest = ", ".join(f"{name.removeprefix('aten.')} {gb:.2f}" for name, gb in work["largest"][:3])
        out.append(f"| {row['tail']} | {row['convolution']} | {work['gb_per_key_frame']:.2f} | "
                   f"{work['gflop_per_key_frame']:.1f} | {work['roofline_ms_per_key_frame']:.2f} | {largest} |")
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=64, help="sessions per batch (default 64)")
    parser.add_argument("--size", type=frame_size, default=(64, 64), help="frame size WIDTHxHEIGHT (default 64x64)")
    parser.add_argument("--bandwidth", type=float, default=3350,
                        help="the roofline's memory bandwidth, GB/s (default 3350: an H100 SXM's)")
    parser.add_argument("--peak", type=float, default=67,
                        help="the roofline's float32 peak, TFLOP/s (default 67: an H100 SXM's without tensor cores)")
    parser.add_argument("--out", type=Path, help="results JSON; the Markdown table goes beside it (same stem)")
    args = parser.parse_args(argv)
    if args.sessions < 2:
        parser.error("--sessions must be at least 2")
    if not (args.bandwidth > 0 and args.peak > 0):
        parser.error("--bandwidth and --peak must be positive")
    roofline = Roofline(args.bandwidth * 1e9, args.peak * 1e12)
    rows = measure(args.sessions, args.size, roofline)
    table = lines(rows, args.sessions, args.size, roofline)
    print("\n".join(table))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"command": script_command(__file__, argv), "torch": torch.__version__,
                                        "sessions": args.sessions, "size": f"{args.size[0]}x{args.size[1]}",
                                        "roofline": {"bandwidth": roofline.bandwidth, "peak": roofline.peak},
                                        "rows": rows}, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(
            "\n".join(["# Operations of the batched engine", "", "```", script_command(__file__, argv), "```", "",
                       *table]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
