"""Regions of one camera spread over an edge cluster on Ray (seed 004, Algorithms 1 and 2).

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
from shadowtutor.acceleration.regions.labeller import FlowPathConfig, KeyFlows, RegionKey, charge


class ClusterError(RuntimeError):
    """The cluster cannot be reached, or has no live worker left."""


@dataclass(frozen=True)
class RegionResult:
    t: int
    region: int
    labels: np.ndarray
    key: RegionKey | None  # a new key (the segmentation path ran), else None


class RegionWorker:
    """One worker's two paths and local key buffer (run as a Ray actor by :func:`start_workers`)."""

    def __init__(self, student_state: Mapping[str, torch.Tensor], class_names: tuple[str, ...],
                 network_state: Mapping[str, torch.Tensor] | None, config: FlowPathConfig, margin: int) -> None:
        from shadowtutor.models.checkpoint import student_from_state_dict
        from shadowtutor.models.inference import build_inference_backend

        torch.set_num_threads(1)  # one CPU per worker (its Ray resource): no thread pools fighting over it
        cv2.setNumThreads(1)
        self.backend = build_inference_backend("torch", student_from_state_dict(student_state, class_names))
        network = None
        if network_state is not None:  # the decision rules' network (a fixed interval needs none)
            network = DecisionNetwork()
            network.load_state_dict(dict(network_state))
            network.eval()
        self.policy = config.policy(network)
        self.config = config
        self.margin = margin
        self.flow = FlowEstimator()
        self.keys: dict[int, RegionKey] = {}  # the local key buffer
        self.generation = 0

    def load_weights(self, update: Mapping[str, torch.Tensor], generation: int) -> None:
        self.backend.load_weights(update)
        self.generation = generation

    def process(self, frame: np.ndarray, t: int, region: int, key: RegionKey | None) -> RegionResult:
        """Algorithm 2 for one region of frame ``t`` (``key``: the master's newer key, if it sent one)."""
        if key is not None:
            self.keys[region] = key
        grid = RegionGrid(frame.shape[1], frame.shape[0], self.config.regions, self.margin)
        flows = KeyFlows(self.flow, self.flow.small_grey(frame))
        local = self.keys.get(region)
        if (local is not None and local.generation == self.generation
                and 0 < t - local.frame <= self.config.max_key_age and not self.policy.due([local])[0]):
            features = flows.features(local, t - local.frame, self.config.max_key_age)[None]
            take, scores = self.policy.take_flow(features, np.array([t - local.frame]), np.array([local.spent]),
                                                 together=False)
            if take[0]:
                charge(local, float(scores[0]) if scores is not None else None)
                return RegionResult(t, region, flows.warped_labels(local), None)
        context = grid.margin_box(region)
        labels = self.backend.infer(np.ascontiguousarray(crop(frame, context)))
        key = RegionKey.cut(self.flow, flows.grey, labels, context, grid.boxes[region], t, self.generation)
        self.keys[region] = key
        return RegionResult(t, region, key.region_labels(key.labels), key)


def connect(address: str) -> None:
    """Join the Ray cluster at ``HOST:PORT`` (or ``auto``); a clear error when nothing answers there."""
    import ray

    if address != "auto":
        host, _, port = address.rpartition(":")
        try:
            socket.create_connection((host or "127.0.0.1", int(port)), timeout=3).close()
        except (OSError, ValueError) as exc:
            raise ClusterError(f"no Ray cluster reachable at {address!r} ({exc}); start one with "
                               "`ray start --head` and join workers with `ray start --address HOST:6379`") from None
    if not ray.is_initialized():
        ray.init(address=address, log_to_driver=False)


def start_workers(student_state: Mapping[str, torch.Tensor], class_names: tuple[str, ...],
                  network: DecisionNetwork | None, config: FlowPathConfig, margin: int,
                  per_node: int = 1) -> list[Any]:
    """One worker actor per CPU node of the cluster (``per_node`` each), pinned to its node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    nodes = [n for n in ray.nodes() if n["Alive"] and n["Resources"].get("CPU", 0) >= 1]
    if not nodes:
        raise ClusterError("the Ray cluster has no node with a CPU for a worker; join one with `ray start --address`")
    actor = ray.remote(num_cpus=1, max_restarts=0)(RegionWorker)
    state = ray.put(dict(student_state))
    network_state = ray.put(network.state_dict() if network is not None else None)
    return [actor.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
            .remote(state, class_names, network_state, config, margin)
            for n in nodes for _ in range(per_node)]


class ClusterMaster:
    """Algorithm 1: frames in, labelled frames out in order, regions spread over idle workers."""

    def __init__(self, workers: list[Any], regions: int = 4, key_lag: int = 15, in_flight: int = 2) -> None:
        if not workers:
            raise ClusterError("no workers")
        self.workers = list(workers)
        self.regions = regions
        self.key_lag = key_lag
        self.in_flight = in_flight  # frames whose regions may be out at once
        self.idle: deque[Any] = deque(self.workers)  # IdleQueue
        self.key_table: dict[tuple[int, int], int] = {}  # (worker index, region) -> frame of its key
        self.global_keys: dict[int, RegionKey] = {}  # GlobalKeyBuffer
        self.generation = 0
        self.reassigned = 0
        self.queue_depth = 0  # regions left waiting for an idle worker after the last dispatch

    @property
    def live_workers(self) -> int:
        return sum(w is not None for w in self.workers)

    def load_weights(self, update: Mapping[str, torch.Tensor]) -> None:
        """Install a weight update on every worker; keys made by the old student are stale everywhere."""
        import ray

        self.generation += 1
        self.global_keys.clear()
        self.key_table.clear()
        ray.get([w.load_weights.remote(dict(update), self.generation) for w in self.workers if w is not None])

    def label_stream(self, frames: Iterable[np.ndarray]) -> Iterator[tuple[int, np.ndarray]]:
        """``(t, labels)`` for every frame, in order, each exactly once."""
        import ray
        from ray.exceptions import RayActorError

        source = iter(frames)
        inputs: deque[tuple[int, int]] = deque()  # InputQueue: (frame, region)
        refs: dict[int, Any] = {}
        shapes: dict[int, tuple[int, int]] = {}
        outputs: dict[int, dict[int, np.ndarray]] = {}
        pending: dict[Any, tuple[Any, int, int]] = {}
        next_in, next_out, exhausted = 0, 0, False
        while True:
            while not exhausted and next_in - next_out < self.in_flight:
                frame = next(source, None)
                if frame is None:
                    exhausted = True
                    break
                refs[next_in], shapes[next_in], outputs[next_in] = ray.put(frame), frame.shape[:2], {}
                inputs.extend((next_in, r) for r in range(self.regions))
                next_in += 1
            while inputs and self.idle:  # MasterSender
                t, r = inputs.popleft()
                worker = self.idle.popleft()
                pending[worker.process.remote(refs[t], t, r, self._key_for(worker, r))] = (worker, t, r)
            self.queue_depth = len(inputs)
            if next_out == next_in and exhausted:
                return
            if not pending:
                raise ClusterError("every worker of the cluster is gone; frames are left unlabelled")
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:  # MasterReceiver
                worker, t, r = pending.pop(ref)
                try:
                    result: RegionResult = ray.get(ref)
                except RayActorError:
                    self._drop(worker)
                    inputs.appendleft((t, r))
                    self.reassigned += 1
                    continue
                self.idle.append(worker)
                if result.key is not None:
                    self.key_table[(self._index(worker), r)] = result.key.frame
                    if r not in self.global_keys or self.global_keys[r].frame < result.key.frame:
                        self.global_keys[r] = result.key
                outputs[t][r] = result.labels
            while next_out in outputs and len(outputs[next_out]) == self.regions:
                yield next_out, self._assemble(shapes.pop(next_out), outputs.pop(next_out))
                del refs[next_out]
                next_out += 1

    def _key_for(self, worker: Any, region: int) -> RegionKey | None:
        """The global key, when the worker's copy is more than ``key_lag`` frames older (or missing)."""
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
        self.workers[index] = None  # keeps the other indices of the key table valid
        self.key_table = {k: v for k, v in self.key_table.items() if k[0] != index}

    def _assemble(self, shape: tuple[int, int], parts: dict[int, np.ndarray]) -> np.ndarray:
        grid = RegionGrid(shape[1], shape[0], self.regions)
        out = np.empty(shape, dtype=np.uint8)
        for r, (x0, y0, x1, y1) in enumerate(grid.boxes):
            out[y0:y1, x0:x1] = parts[r]
        return out
