"""An acceleration on trial: timed against the plain student over its first frames, replaced by it
if slower.

:class:`StepAside` labels with the acceleration (the *candidate*) and times it on ``frames`` frames
after ``warmup`` untimed ones; on every ``probe_every``-th of them, the first included, it also
times the plain student (its labels unused; one untimed call before the first). Then it compares the
medians once: when the candidate is slower, the plain student labels every later frame (logged once,
and in :meth:`stats`), and the candidate is closed. While on trial both hold the same weights; after
the decision only the one in use.
"""

from __future__ import annotations

import itertools
import logging
import statistics
import time
from collections.abc import Iterable, Iterator, Mapping

import numpy as np
import torch

from shadowtutor.acceleration.labellers.base import FrameLabeller, LabellerStats, Trial

log = logging.getLogger(__name__)

# first frames build caches, start sessions and actors: no yardstick
DEFAULT_WARMUP = 3
DEFAULT_PROBE_EVERY = 5


class StepAside:
    """``candidate`` while it is at least as fast as ``plain`` over the trial, else ``plain``."""

    def __init__(
        self,
        candidate: FrameLabeller,
        plain: FrameLabeller,
        frames: int,
        *,
        warmup: int = DEFAULT_WARMUP,
        probe_every: int = DEFAULT_PROBE_EVERY,
    ) -> None:
        if frames < 1 or warmup < 0 or probe_every < 1:
            raise ValueError(
                f"a trial needs frames >= 1, warmup >= 0, probe_every >= 1; got {frames}, "
                f"{warmup}, {probe_every}"
            )
        self.candidate = candidate
        self.plain = plain
        self.frames = frames
        self.warmup = warmup
        self.probe_every = probe_every
        self.active: FrameLabeller = candidate
        # set once, when the trial ends
        self.trial: Trial | None = None
        self._seen = 0
        self._candidate_seconds: list[float] = []
        self._plain_seconds: list[float] = []
        # a pipeline() over the candidate is running
        self._pipelined = False

    @property
    def kind(self) -> str:
        return self.active.kind

    @property
    def on_trial(self) -> bool:
        return self.trial is None

    def load(self, state: Mapping[str, torch.Tensor], class_names: tuple[str, ...]) -> None:
        for labeller in self._holders():
            labeller.load(state, class_names)

    def apply(self, update: Mapping[str, torch.Tensor]) -> None:
        for labeller in self._holders():
            labeller.apply(update)

    def label(self, frame: np.ndarray) -> np.ndarray:
        if not self.on_trial:
            return self.active.label(frame)
        start = time.perf_counter()
        labels = self.candidate.label(frame)
        seconds = time.perf_counter() - start
        self._seen += 1
        timed = self._seen - self.warmup
        if timed > 0:
            self._candidate_seconds.append(seconds)
            if timed % self.probe_every == 1 or self.probe_every == 1:
                self._probe(frame)
            if timed >= self.frames:
                self._decide()
        return labels

    def pipeline(self, frames: Iterable[np.ndarray]) -> Iterator[np.ndarray]:
        source = iter(frames)
        if not self.on_trial:
            yield from self.active.pipeline(source)
            return
        self._pipelined = True
        try:
            for frame in self.candidate.pipeline(source):
                yield frame
                # stepped aside at this frame: the frames drawn ahead go to plain
                if self.active is self.plain:
                    ahead = self.candidate.release()
                    self.candidate.close()
                    self._pipelined = False
                    yield from self.plain.pipeline(itertools.chain(ahead, source))
                    return
        finally:
            self._pipelined = False

    def release(self) -> list[np.ndarray]:
        return self.active.release()

    def new_scene(self) -> None:
        self.active.new_scene()

    def stats(self) -> LabellerStats:
        stats = self.active.stats()
        return LabellerStats(
            kind=stats.kind,
            change=stats.change,
            regions=stats.regions,
            cluster=stats.cluster,
            trial=self.trial,
        )

    def close(self) -> None:
        self.candidate.close()
        self.plain.close()

    def _holders(self) -> list[FrameLabeller]:
        return [self.candidate, self.plain] if self.on_trial else [self.active]

    def _probe(self, frame: np.ndarray) -> None:
        if not self._plain_seconds:
            # the plain student's first call starts its session: no yardstick
            self.plain.label(frame)
        start = time.perf_counter()
        self.plain.label(frame)
        self._plain_seconds.append(time.perf_counter() - start)

    def _decide(self) -> None:
        candidate = statistics.median(self._candidate_seconds)
        plain = statistics.median(self._plain_seconds)
        slower = candidate > plain
        self.trial = Trial(
            candidate=self.candidate.kind,
            plain=self.plain.kind,
            frames=len(self._candidate_seconds),
            candidate_seconds=candidate,
            plain_seconds=plain,
            stepped_aside=slower,
        )
        if slower:
            log.warning(
                "%s labels a frame in %.1f ms, the plain student on %s in %.1f ms (%.2fx): it "
                "steps aside, the plain student labels the rest of the run",
                self.candidate.kind,
                1000 * candidate,
                self.plain.kind,
                1000 * plain,
                self.trial.speedup,
            )
            self.active = self.plain
            # else pipeline() hands the frames drawn ahead to plain, then closes it
            if not self._pipelined:
                self.candidate.release()
                self.candidate.close()
        else:
            log.info(
                "%s labels a frame in %.1f ms, the plain student on %s in %.1f ms (%.2fx): kept",
                self.candidate.kind,
                1000 * candidate,
                self.plain.kind,
                1000 * plain,
                self.trial.speedup,
            )
            self.plain.close()
