"""The edge cluster (:mod:`shadowtutor.acceleration.regions.cluster`) as a labeller: regions on Ray
workers.

Frames drawn through :meth:`ClusterLabeller.pipeline` are submitted as they are drawn, up to
``in_flight`` ahead of the frame being labelled, so that workers idle on one frame's last regions
take the next frame's first ones. Frames are numbered by one counter for the labeller's life, so a
region's key is warped at the next frames (the flow path) whichever call labels them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator, Mapping

import numpy as np
import torch

from shadowtutor.acceleration.labellers.base import LabellerStats
from shadowtutor.acceleration.regions.cluster import ClusterMaster, connect, start_workers
from shadowtutor.acceleration.regions.labeller import FlowPathConfig
from shadowtutor.models.inference import check_frame

# Pixels of context around the region a worker segments alone (its student call and its flow).
CLUSTER_MARGIN = 96


class ClusterLabeller:
    """Regions of each frame on the workers of the Ray cluster at ``address`` (``HOST:PORT`` or
    ``auto``).

    The first :meth:`load` joins the cluster and starts one worker per CPU node with the weights;
    later loads and every :meth:`apply` go to every worker, and the keys of the old student are
    dropped.
    """

    kind = "cluster"

    def __init__(
        self,
        address: str,
        config: FlowPathConfig,
        margin: int = CLUSTER_MARGIN,
        *,
        in_flight: int = 2,
        workers_per_node: int = 1,
    ) -> None:
        if in_flight < 1:
            raise ValueError(f"in_flight must be >= 1 frame, got {in_flight}")
        self.address = address
        self.config = config
        self.margin = margin
        self.in_flight = in_flight
        self.workers_per_node = workers_per_node
        self.master: ClusterMaster | None = None
        # submitted, not yet yielded by pipeline
        self._ahead: deque[tuple[np.ndarray, int]] = deque()
        # yielded by pipeline, not yet labelled
        self._yielded: deque[tuple[np.ndarray, int]] = deque()

    def load(self, state: Mapping[str, torch.Tensor], class_names: tuple[str, ...]) -> None:
        if self.master is not None:
            self.master.load_weights(state)
            return
        connect(self.address)
        workers = start_workers(
            state,
            class_names,
            self.config.load_network(),
            self.config,
            self.margin,
            per_node=self.workers_per_node,
        )
        self.master = ClusterMaster(workers, self.config.regions, in_flight=self.in_flight)

    def apply(self, update: Mapping[str, torch.Tensor]) -> None:
        self._require().load_weights(update)

    def label(self, frame: np.ndarray) -> np.ndarray:
        master = self._require()
        if self._yielded and self._yielded[0][0] is frame:
            return master.collect(self._yielded.popleft()[1])
        return master.collect(master.submit(check_frame(frame)))

    def pipeline(self, frames: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
        source = iter(frames)
        while True:
            while (
                self.master is not None and len(self._ahead) + len(self._yielded) < self.in_flight
            ):
                frame = next(source, None)
                if frame is None:
                    break
                frame = check_frame(frame)
                self._ahead.append((frame, self.master.submit(frame)))
            if self._ahead:
                item = self._ahead.popleft()
                self._yielded.append(item)
                yield item[0]
                continue
            # no weights yet: nothing to start early
            frame = next(source, None)
            if frame is None:
                return
            yield frame

    def release(self) -> list[np.ndarray]:
        for _, t in [*self._yielded, *self._ahead]:
            self._require().discard(t)
        frames = [frame for frame, _ in self._ahead]
        self._ahead.clear()
        self._yielded.clear()
        return frames

    def new_scene(self) -> None:
        if self.master is not None:
            self.master.invalidate_keys()

    def stats(self) -> LabellerStats:
        master = self.master
        if master is None:
            return LabellerStats(kind=self.kind)
        return LabellerStats(
            kind=self.kind, regions=master.last, cluster=(master.live_workers, master.queue_depth)
        )

    def close(self) -> None:
        """Stop the workers (the cluster itself stays up)."""
        if self.master is None:
            return
        import ray

        for worker in self.master.workers:
            if worker is not None:
                ray.kill(worker)
        self.master = None

    def _require(self) -> ClusterMaster:
        if self.master is None:
            raise RuntimeError("the student has no weights yet; the server's WELCOME installs them")
        return self.master
