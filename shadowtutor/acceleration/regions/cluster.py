"""Regions of one camera spread over an edge cluster on Ray (Yang et al.'s embedded cluster,
Algorithms 1 and 2).

The master (:class:`ClusterMaster`, on the camera's device) cuts each frame into regions and
hands them, first in first out, to idle workers (one Ray actor per worker node, its index in
a FIFO idle queue); the frame itself travels once through Ray's object store. Each worker
(:class:`RegionWorker`) keeps a *local key buffer* and runs, per region, the flow path if the
decision network trusts it, else the segmentation path (the student on the region plus a
context margin), whose result becomes a new key. The master keeps the *global key buffer*
(the newest key per region) and a *key table* (which key each worker holds) and forwards the
global key to a worker whose copy is more than ``key_lag`` frames older (Algorithm 1 line 15).
Frames come out whole and in order. A worker that dies (its node gone, its process killed)
loses nothing: the region it held goes back to the head of the input queue and another worker
takes it. Ray does the transport, the object store and the membership; nothing here is RPC.
"""

from __future__ import annotations

import socket
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
import torch

from shadowtutor.acceleration.regions.decision import DecisionNetwork
from shadowtutor.acceleration.regions.flow import FlowEstimator
from shadowtutor.acceleration.regions.grid import RegionGrid, crop
from shadowtutor.acceleration.regions.labeller import (
    FLOW,
    SEGMENT,
    FlowPathConfig,
    FrameRegions,
    KeyFlows,
    RegionKey,
    charge,
)


class ClusterError(RuntimeError):
    """The cluster cannot be reached, or has no live worker left."""


@dataclass(kw_only=True, frozen=True)
class RegionResult:
    """A worker's labels for one region of frame ``t``, with the key it made (segmentation path) and
    how old the labels' key is."""

    t: int
    region: int
    labels: np.ndarray
    # a new key (the segmentation path ran), else None
    key: RegionKey | None
    # frames since the key the labels come from (0: segmented now)
    age: int = 0


class RegionWorker:
    """One worker's two paths and local key buffer (run as a Ray actor by :func:`start_workers`)."""

    def __init__(
        self,
        student_state: Mapping[str, torch.Tensor],
        class_names: tuple[str, ...],
        network_state: Mapping[str, torch.Tensor] | None,
        *,
        config: FlowPathConfig,
        margin: int,
    ) -> None:
        from shadowtutor.models.checkpoint import student_from_state_dict
        from shadowtutor.models.inference import build_inference_backend

        # one CPU per worker (its Ray resource): no thread pools fighting over it
        torch.set_num_threads(1)
        cv2.setNumThreads(1)
        self.backend = build_inference_backend(
            "torch", student_from_state_dict(student_state, class_names)
        )
        network = None
        # the decision rules' network (a fixed interval needs none)
        if network_state is not None:
            network = DecisionNetwork()
            network.load_state_dict(dict(network_state))
            network.eval()
        self.policy = config.policy(network)
        self.config = config
        self.margin = margin
        self.flow = FlowEstimator()
        # the local key buffer
        self.keys: dict[int, RegionKey] = {}
        self.generation = 0

    def load_weights(self, update: Mapping[str, torch.Tensor], generation: int) -> None:
        self.backend.load_weights(update)
        self.generation = generation

    def process(
        self, frame: np.ndarray, t: int, region: int, key: RegionKey | None
    ) -> RegionResult:
        """Algorithm 2 for one region of frame ``t`` (``key``: the master's newer key, if it sent
        one)."""
        if key is not None:
            self.keys[region] = key
        grid = RegionGrid(
            width=frame.shape[1],
            height=frame.shape[0],
            regions=self.config.regions,
            margin=self.margin,
        )
        flows = KeyFlows(self.flow, self.flow.small_grey(frame))
        local = self.keys.get(region)
        if (
            local is not None
            and local.generation == self.generation
            and 0 < t - local.frame <= self.config.max_key_age
            and not self.policy.due([local])[0]
        ):
            features = flows.features(local, t - local.frame, self.config.max_key_age)[None]
            take, scores = self.policy.take_flow(
                features, np.array([t - local.frame]), np.array([local.spent]), together=False
            )
            if take[0]:
                charge(local, float(scores[0]) if scores is not None else None)
                return RegionResult(
                    t=t,
                    region=region,
                    labels=flows.warped_labels(local),
                    key=None,
                    age=t - local.frame,
                )
        context = grid.margin_box(region)
        labels = self.backend.infer(np.ascontiguousarray(crop(frame, context)))
        key = RegionKey.cut(
            self.flow, flows.grey, labels, context, grid.boxes[region], t, self.generation
        )
        self.keys[region] = key
        return RegionResult(t=t, region=region, labels=key.region_labels(key.labels), key=key)


def connect(address: str) -> None:
    """Join the Ray cluster at ``HOST:PORT`` (or ``auto``); a clear error when nothing answers
    there."""
    import ray

    if address != "auto":
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host or "127.0.0.1", int(port)), timeout=3).close()
        except (OSError, ValueError) as exc:
            raise ClusterError(
                f"no Ray cluster reachable at {address!r} ({exc}); start one with "
                "`ray start --head` and join workers with `ray start --address HOST:6379`"
            ) from None
    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)


def start_workers(
    student_state: Mapping[str, torch.Tensor],
    class_names: tuple[str, ...],
    network: DecisionNetwork | None,
    config: FlowPathConfig,
    margin: int,
    per_node: int = 1,
) -> list[Any]:
    """One worker actor per CPU node of the cluster (``per_node`` each), pinned to its node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) >= 1]
    if not nodes:
        raise ClusterError(
            "the Ray cluster has no node with a CPU for a worker; join one with `ray start "
            "--address`"
        )
    actor = ray.remote(num_cpus=1, max_restarts=0)(RegionWorker)
    state = ray.put(dict(student_state))
    network_state = ray.put(network.state_dict() if network is not None else None)
    return [
        actor.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)
        ).remote(state, class_names, network_state, config=config, margin=margin)
        for n in nodes
        for _ in range(per_node)
    ]


class ClusterMaster:
    """Algorithm 1: frames in, labelled frames out in order, regions spread over idle workers.

    Frames are numbered by one counter for the master's whole life (:meth:`submit`), so that a
    worker's key of frame ``t`` is warped at frame ``t + 1`` whatever the calls that brought them.
    """

    def __init__(
        self, workers: list[Any], regions: int = 4, key_lag: int = 15, *, in_flight: int = 2
    ) -> None:
        if not workers:
            raise ClusterError("no workers")
        self.workers = list(workers)
        self.regions = regions
        self.key_lag = key_lag
        # frames whose regions may be out at once in label_stream
        self.in_flight = in_flight
        # IdleQueue
        self.idle: deque[Any] = deque(self.workers)
        # (worker index, region) -> frame of its key
        self.key_table: dict[tuple[int, int], int] = {}
        # GlobalKeyBuffer
        self.global_keys: dict[int, RegionKey] = {}
        self.generation = 0
        self.reassigned = 0
        # regions left waiting for an idle worker after the last dispatch
        self.queue_depth = 0
        # the number the next submitted frame gets
        self.next_t = 0
        # the paths of the last collected frame's regions
        self.last: FrameRegions | None = None
        # InputQueue: (frame, region)
        self._inputs: deque[tuple[int, int]] = deque()
        self._refs: dict[int, Any] = {}
        self._shapes: dict[int, tuple[int, int]] = {}
        self._outputs: dict[int, dict[int, RegionResult]] = {}
        self._pending: dict[Any, tuple[Any, int, int]] = {}

    @property
    def live_workers(self) -> int:
        return sum(w is not None for w in self.workers)

    def load_weights(self, update: Mapping[str, torch.Tensor]) -> None:
        """Install a weight update on every worker; keys made by the old student are stale
        everywhere.

        Regions already handed out are labelled by the student their worker held then."""
        import ray

        self.generation += 1
        self.global_keys.clear()
        self.key_table.clear()
        ray.get(
            [
                w.load_weights.remote(dict(update), self.generation)
                for w in self.workers
                if w is not None
            ]
        )

    def invalidate_keys(self) -> None:
        """Make every key stale (the next frames start another scene) without changing weights."""
        self.load_weights({})

    def submit(self, frame: np.ndarray) -> int:
        """Queue one frame's regions (handed to idle workers at once); the frame's number, for
        :meth:`collect`."""
        import ray

        t = self.next_t
        self.next_t += 1
        self._refs[t], self._shapes[t], self._outputs[t] = ray.put(frame), frame.shape[:2], {}
        self._inputs.extend((t, r) for r in range(self.regions))
        self._dispatch()
        return t

    def collect(self, t: int) -> np.ndarray:
        """The labels of submitted frame ``t`` (waits for its regions; each frame is collected
        once)."""
        if t not in self._outputs:
            raise KeyError(f"frame {t} was not submitted, or was collected or discarded")
        while len(self._outputs[t]) < self.regions:
            self._dispatch()
            if not self._pending:
                raise ClusterError(
                    "every worker of the cluster is gone; frames are left unlabelled"
                )
            self._receive()
        parts = self._outputs.pop(t)
        del self._refs[t]
        self.last = FrameRegions(
            tuple(FLOW if parts[r].key is None else SEGMENT for r in range(self.regions)),
            tuple(parts[r].age for r in range(self.regions)),
            (None,) * self.regions,
        )
        return self._assemble(self._shapes.pop(t), {r: part.labels for r, part in parts.items()})

    def discard(self, t: int) -> None:
        """Forget submitted frame ``t``: its regions not handed out yet are dropped, its results
        ignored."""
        self._inputs = deque(item for item in self._inputs if item[0] != t)
        for table in (self._outputs, self._refs, self._shapes):
            table.pop(t, None)

    def label_stream(self, frames: Iterable[np.ndarray]) -> Iterator[tuple[int, np.ndarray]]:
        """``(t, labels)`` for every frame, in order, each exactly once; ``in_flight`` frames out at
        once."""
        source = iter(frames)
        submitted: deque[int] = deque()
        while True:
            while len(submitted) < self.in_flight:
                frame = next(source, None)
                if frame is None:
                    break
                submitted.append(self.submit(frame))
            if not submitted:
                return
            t = submitted.popleft()
            yield t, self.collect(t)

    def _dispatch(self) -> None:
        """MasterSender: queued regions to idle workers, first in first out."""
        while self._inputs and self.idle:
            t, r = self._inputs.popleft()
            worker = self.idle.popleft()
            self._pending[worker.process.remote(self._refs[t], t, r, self._key_for(worker, r))] = (
                worker,
                t,
                r,
            )
        self.queue_depth = len(self._inputs)

    def _receive(self) -> None:
        """MasterReceiver: one finished region (or a dead worker's region back at the head of the
        queue)."""
        import ray
        from ray.exceptions import RayActorError

        done, _ = ray.wait(list(self._pending), num_returns=1)
        for ref in done:
            worker, t, r = self._pending.pop(ref)
            try:
                result: RegionResult = ray.get(ref)
            except RayActorError:
                self._drop(worker)
                if t in self._outputs:
                    self._inputs.appendleft((t, r))
                self.reassigned += 1
                continue
            self.idle.append(worker)
            if result.key is not None:
                self.key_table[(self._index(worker), r)] = result.key.frame
                if r not in self.global_keys or self.global_keys[r].frame < result.key.frame:
                    self.global_keys[r] = result.key
            if t in self._outputs:
                self._outputs[t][r] = result

    def _key_for(self, worker: Any, region: int) -> RegionKey | None:
        """The global key, when the worker's copy is more than ``key_lag`` frames older (or
        missing)."""
        key = self.global_keys.get(region)
        if key is None or key.generation != self.generation:
            return None
        held = self.key_table.get((self._index(worker), region))
        if held is not None and key.frame - held <= self.key_lag:
            return None
        self.key_table[(self._index(worker), region)] = key.frame
        return key

    def _index(self, worker: Any) -> int:
        return next(i for i, w in enumerate(self.workers) if w is worker)

    def _drop(self, worker: Any) -> None:
        index = self._index(worker)
        # keeps the other indices of the key table valid
        self.workers[index] = None
        self.key_table = {k: v for k, v in self.key_table.items() if k[0] != index}

    def _assemble(self, shape: tuple[int, int], parts: dict[int, np.ndarray]) -> np.ndarray:
        grid = RegionGrid(width=shape[1], height=shape[0], regions=self.regions)
        out = np.empty(shape, dtype=np.uint8)
        for r, (x0, y0, x1, y1) in enumerate(grid.boxes):
            out[y0:y1, x0:x1] = parts[r]
        return out
