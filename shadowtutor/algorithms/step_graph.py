"""Repeat one training step as a replayed CUDA graph: the host's cost of a step paid once, not per step.

:func:`replay_step` runs ``step`` ``times`` times on a CUDA device: once eagerly on a side stream (the
warm-up that a capture needs: lazy initialisations, the cuBLAS and cuDNN workspaces of that stream), then
once captured into a CUDA graph on that stream, which is then replayed for the remaining times. A replay
launches every kernel of the step at once, so that Python, ``vmap``, autograd and the launches themselves
cost nothing per step.

``step`` must be a function of no arguments that reads and writes only tensors that outlive the calls, in
place (a replay writes the memory the capture saw), and reads nothing back to the host. The capture is
thread-local (``capture_error_mode="thread_local"``): other threads may use the device meanwhile (the
server's teacher does), only this thread may not synchronise with it.

Autograd may hold a stream from before the capture (a node made by an eager step), whose wait would pull
that stream into the capture and invalidate it. Where torch has the switch
(``torch.autograd.graph.set_override_stale_capture_stream``), :func:`replay_step` turns it on for the
process: such a stream is replaced by the capturing one (all work before a capture has ended by then).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

log = logging.getLogger(__name__)


def replay_step(step: Callable[[], object], times: int, device: torch.device) -> bool:
    """Run ``step`` ``times`` times on the CUDA ``device``, the calls after the first as a replayed graph.

    Returns whether a graph was replayed: False when ``times`` is under 2 (nothing to replay) or when the
    capture failed (logged), in which case every call ran eagerly. Either way the tensors ``step`` writes end
    as ``times`` eager calls would leave them (a capture runs nothing, so a failed one changes nothing).
    ValueError for a device that is not CUDA.
    """
    if device.type != "cuda":
        raise ValueError(f"a CUDA graph needs a CUDA device, not {device}")
    if times < 1:
        return False
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        step()
    torch.cuda.current_stream(device).wait_stream(stream)
    if times == 1:
        return False
    redirect_stale_streams()
    graph = torch.cuda.CUDAGraph()
    failure = None
    try:
        with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
            step()
    except RuntimeError as exc:
        failure = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if failure is not None:  # out of the handler: the failed capture's tensors and memory pool are released
        del graph
        torch.cuda.empty_cache()
        _log_failure(failure)
        for _ in range(times - 1):
            step()
        return False
    for _ in range(times - 1):
        graph.replay()
    torch.cuda.current_stream(device).synchronize()  # the replays end before the graph and its memory go
    return True


def redirect_stale_streams() -> bool:
    """Turn on, for the process, autograd's replacement of a stream from before a capture by the capturing one,
    where this torch has it; returns whether it has. Only captures are affected."""
    switch = getattr(torch.autograd.graph, "set_override_stale_capture_stream", None)
    if switch is None:
        return False
    switch(True)
    return True


_reported: set[str] = set()


def _log_failure(reason: str) -> None:
    """A warning the first time a reason is seen in this process, a debug line after."""
    level = logging.DEBUG if reason in _reported else logging.WARNING
    _reported.add(reason)
    log.log(level, "a distillation step could not be captured as a CUDA graph (%s): running it eagerly", reason)
