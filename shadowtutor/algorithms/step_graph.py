"""Capture a call as a CUDA graph, to replay it later on the same memory: the host's cost paid once.

:func:`capture` runs ``call`` once eagerly on a side stream (the warm-up that a capture needs: lazy
initialisations, the cuBLAS and cuDNN workspaces of that stream; its effects are real), then
captures it into a CUDA graph on that stream (a capture runs nothing). Each
:meth:`torch.cuda.CUDAGraph.replay` then launches every kernel of the call at once, so that Python,
autograd and the launches cost nothing.

``call`` must be a function of no arguments that reads and writes only tensors that outlive the
graph, in place (a replay reads and writes the memory the capture saw), and reads nothing back to
the host. The capture is thread-local (``capture_error_mode="thread_local"``): other threads may use
the device meanwhile (the server's teacher does), only this thread may not synchronise with it.

Autograd may hold a stream from before the capture (a node made by an eager call), whose wait would
pull that stream into the capture and invalidate it. Where torch has the switch
(``torch.autograd.graph.set_override_stale_capture_stream``), :func:`capture` turns it on for the
process: such a stream is replaced by the capturing one (all work before a capture has ended by
then).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

log = logging.getLogger(__name__)


def capture(call: Callable[[], object], device: torch.device) -> torch.cuda.CUDAGraph | None:
    """Run ``call`` once on the CUDA ``device`` and capture it: the graph to replay it with, or None
    where the capture failed (logged; the one eager run stands, and nothing of the failed capture
    stays in memory). The eager run has ended on return. ValueError for a device that is not
    CUDA."""
    if device.type != "cuda":
        raise ValueError(f"a CUDA graph needs a CUDA device, not {device}")
    stream = torch.cuda.Stream(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(stream):
        call()
    torch.cuda.current_stream(device).wait_stream(stream)
    redirect_stale_streams()
    graph = torch.cuda.CUDAGraph()
    failure = None
    try:
        with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
            call()
    except RuntimeError as exc:
        failure = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    # out of the handler: the failed capture's tensors and memory pool are released
    if failure is not None:
        del graph
        torch.cuda.empty_cache()
        _log_failure(failure)
        return None
    torch.cuda.current_stream(device).synchronize()
    return graph


def redirect_stale_streams() -> bool:
    """Turn on, for the process, autograd's replacement of a stream from before a capture by the
    capturing one, where this torch has it; returns whether it has. Only captures are affected."""
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
    log.log(
        level,
        "a distillation batch could not be captured as a CUDA graph (%s): running it eagerly",
        reason,
    )
