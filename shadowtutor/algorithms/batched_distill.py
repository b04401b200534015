"""Algorithm 1 for many sessions at once: one batched run per group of compatible key frames.

:func:`distill_batch` takes one key frame for each of several :class:`Distiller` s and leaves every
distiller as its own :meth:`Distiller.train` would have (the same step count, metric and restore;
the weights and Adam's state equal within float rounding), with the work of the whole group issued
as one batch:

* the frozen front runs once for the group's frames (its weights are shared: every session of a
  group has the same front), each frame normalised with its own statistics as at batch 1;
* each session's trainable back runs with its own weights, stacked along a leading session axis
  (:class:`~shadowtutor.algorithms.stacked_back.StackedBack`: each layer one batched operation);
* one Adam per session on the stacked tensors, with per-session step counts, learning rates and
  a mask of the sessions still training;
* early stop at THRESHOLD, MAX_UPDATES and the restore of the best student are masks on the
  device: the loop reads nothing back from the device until it ends, then moves the metrics and
  step counts to the host in one transfer.

Key frames can be grouped when their distillers train in partial mode at the same student input
size, class count, restore rule, tail (as written or fused) and precision, on the same device, with
fronts of equal weights; anything else runs through its own :meth:`Distiller.train`. A group trains
at its distillers' precision, as :meth:`Distiller.train` does. Each group trains the tail its
distillers train. ``convolution`` picks how the sessions' own convolutions run: ``grouped`` (one
grouped convolution) or ``matmul`` (im2col and one batched matrix product):
:mod:`~shadowtutor.algorithms.stacked_conv`; the same function either way, rounded differently.
``graphs``, on a CUDA device, replays a whole batch (front, steps, bookkeeping) as one CUDA graph
captured for its shape (:func:`train_graphed`), which removes the host's cost of the batch's
training (Python, autograd, kernel launches) from every batch of a shape the engine thread trained
just before; a batch reads and writes only the tensors of its :class:`_BatchState`, in place, for
that reason, the same on every device.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from shadowtutor.algorithms.batched_objective import BatchedObjective
from shadowtutor.algorithms.distill import Distiller, DistillResult, HostKeyFrame, PreparedKeyFrame
from shadowtutor.algorithms.engine_options import CONVOLUTIONS, OBJECTIVES, Convolution, Objective
from shadowtutor.algorithms.stacked_back import StackedBack
from shadowtutor.algorithms.step_graph import capture
from shadowtutor.models.fast_student import frame_tail_fusable, per_frame_front
from shadowtutor.models.host_copy import to_host
from shadowtutor.models.precision import (
    TrainingPrecision,
    bf16_autocast,
    float32_precision,
    training_float32,
)
from shadowtutor.models.student import FRONT_MODULES, StudentNet


@dataclass
class KeyFrameJob:
    """One session's key frame ready for Algorithm 1: its distiller and the key frame as that
    distiller prepared it on the host (:meth:`Distiller.prepare_on_host`: at the student's size,
    with the loss's weights); :func:`distill_batch` uploads it."""

    distiller: Distiller
    key_frame: HostKeyFrame

    @classmethod
    def prepare(
        cls,
        distiller: Distiller,
        frame_bgr: np.ndarray,
        label: np.ndarray,
        boxes: np.ndarray | None = None,
    ) -> KeyFrameJob:
        """The job of a BGR frame ``(H, W, 3)`` uint8, the teacher's labels ``(H, W)`` and, where
        the teacher gives them, its instance boxes ``(N, 4)``; ValueError where the frame and the
        labels differ in size. Changes no distiller, so it may run in any thread while the distiller
        trains on nothing else."""
        return cls(distiller, distiller.prepare_on_host(frame_bgr, label, boxes))


def front_fingerprint(distiller: Distiller) -> str:
    """A digest of the distiller's frozen front weights (computed once per distiller, then cached on
    it)."""
    cached = getattr(distiller, "_front_fingerprint", None)
    if cached is None:
        digest = hashlib.blake2b(digest_size=16)
        state = distiller.student.state_dict()
        prefixes = tuple(f"{name}." for name in FRONT_MODULES)
        for key in sorted(k for k in state if k.startswith(prefixes)):
            digest.update(key.encode())
            digest.update(state[key].detach().cpu().contiguous().numpy().tobytes())
        cached = digest.hexdigest()
        distiller._front_fingerprint = cached  # type: ignore[attr-defined]  # this module's cache, kept on it
    return cached


def group_key(distiller: Distiller, key_frame: PreparedKeyFrame) -> tuple[object, ...] | None:
    """What key frames must share to run in one batch; None: this one runs on its own (full mode, or
    a distiller that trains a chosen coordinate set: :meth:`Distiller.train_sparse`)."""
    if distiller.params.mode != "partial" or distiller.chooser is not None:
        return None
    return (
        tuple(key_frame.x.shape),
        distiller.student.num_classes,
        distiller.params.restore,
        distiller.fuse_tail,
        distiller.precision,
        str(distiller.device),
        front_fingerprint(distiller),
    )


def distill_batch(
    jobs: Sequence[KeyFrameJob],
    convolution: Convolution = "grouped",
    graphs: bool = False,
    objective: Objective = "eager",
) -> list[DistillResult]:
    """Algorithm 1 on every job, compatible ones batched (their convolutions computed as
    ``convolution`` says, their loss and metric as ``objective`` says:
    :class:`~shadowtutor.algorithms.batched_objective. BatchedObjective`; with ``graphs``, on a CUDA
    device, a batch of the shape this thread trained last replayed as one CUDA graph:
    :func:`train_graphed`, the same arithmetic); results in the order of ``jobs``.

    Each distiller may appear once (its key frames depend on each other: ValueError otherwise); an
    unknown ``convolution`` or ``objective`` raises ValueError before any distiller changes.
    """
    if convolution not in CONVOLUTIONS:
        raise ValueError(
            f"unknown convolution {convolution!r}; use one of {', '.join(CONVOLUTIONS)}"
        )
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; use one of {', '.join(OBJECTIVES)}")
    distillers = [job.distiller for job in jobs]
    if len({id(d) for d in distillers}) != len(distillers):
        raise ValueError("a batch holds at most one key frame per distiller")
    prepared = [job.distiller.upload(job.key_frame) for job in jobs]
    groups: dict[tuple[object, ...], list[int]] = {}
    alone: list[int] = []
    for index, (distiller, key_frame) in enumerate(zip(distillers, prepared, strict=True)):
        key = group_key(distiller, key_frame)
        if key is None:
            alone.append(index)
        else:
            groups.setdefault(key, []).append(index)
    results: list[DistillResult | None] = [None] * len(jobs)
    for key, indices in groups.items():
        if len(indices) == 1:
            alone.extend(indices)
            continue
        run = _BatchedRun(
            [distillers[i] for i in indices],
            [prepared[i] for i in indices],
            convolution,
            graphs=graphs,
            objective=objective,
            group=key,
        )
        group_results = run.run()
        for index, result in zip(indices, group_results, strict=True):
            results[index] = result
    for index in alone:
        results[index] = distillers[index].train_prepared(prepared[index])
    return [r for r in results if r is not None]


def stops_early_on_host(device: torch.device) -> bool:
    """Whether a batch reads back, after each step, whether any session still trains, to stop as
    soon as none does: on a CPU, where reading it costs nothing; not on an accelerator, where it
    would wait for the device to finish the step (there every batch runs MAX_UPDATES steps, the
    finished sessions masked)."""
    return device.type == "cpu"


def replays_batches(device: torch.device, graphs: bool) -> bool:
    """Whether batches go through :func:`train_graphed` (CUDA graphs): where asked to, on a CUDA
    device."""
    return graphs and device.type == "cuda"


@dataclass(kw_only=True)
class _BatchState:
    """A batch's tensors on its device: all that training a batch reads (the key frames, every
    session's weights, Adam moments and step counts, learning rates, THRESHOLDs and MAX_UPDATES) and
    writes (the weights, moments and step counts in place, and ``summary``: per session its first
    metric, final metric, steps taken and Adam step count, ``(4, S)`` float64). A captured batch
    keeps one as the memory its replays read and write."""

    x: torch.Tensor
    target: torch.Tensor
    weights: torch.Tensor
    flat: torch.Tensor
    exp_avg: torch.Tensor
    exp_avg_sq: torch.Tensor
    adam_steps: torch.Tensor
    learning_rate: torch.Tensor
    threshold: torch.Tensor
    max_updates: torch.Tensor
    summary: torch.Tensor

    def copy_(self, other: _BatchState) -> None:
        """Take ``other``'s values, tensor by tensor (of the same shapes), in place."""
        for name in self.__dataclass_fields__:
            getattr(self, name).copy_(getattr(other, name))


@dataclass(kw_only=True, frozen=True)
class _Training:
    """Algorithm 1 on a :class:`_BatchState`, the same for every batch of one shape: everything it
    needs but the batch's tensors (the shared front's weights are ``reference``'s, whose back is
    called with each session's trainable weights). Reads nothing back to the host unless
    ``check_on_host``."""

    reference: StudentNet
    keys: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    sizes: tuple[int, ...]
    beta1: float
    beta2: float
    eps: float
    restore_adam: bool
    convolution: Convolution
    objective: Objective
    fuse_tail: bool
    precision: TrainingPrecision
    most: int
    check_on_host: bool

    def shape_key(self) -> tuple[object, ...]:
        """What a batch's captured graph depends on besides the group and the session count."""
        return (
            self.keys,
            self.beta1,
            self.beta2,
            self.eps,
            self.restore_adam,
            self.convolution,
            self.objective,
            self.fuse_tail,
            self.precision,
            self.most,
            self.check_on_host,
        )

    def unflatten(self, flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Views of ``flat (S, weights)`` shaped as the stacked trainable tensors ``(S, *shape)``,
        in key order."""
        parts = torch.split(flat, list(self.sizes), dim=1)
        return tuple(part.view(-1, *shape) for part, shape in zip(parts, self.shapes, strict=True))

    def __call__(self, state: _BatchState) -> None:
        """Train the batch ``state`` holds: its weights, moments and step counts end as each
        session's :meth:`Distiller.train` would leave them, and its ``summary`` says how it went."""
        dec1, enc2, enc1, x1_size, input_size = self._front(state.x)
        scores_only = self.fuse_tail and frame_tail_fusable(*input_size)
        back = StackedBack(
            self.reference, self.convolution, self.fuse_tail, scores_only=scores_only
        )
        objective = BatchedObjective(
            state.target,
            state.weights,
            self.reference.num_classes,
            upsample_to=input_size if scores_only else None,
            compiled=self.objective == "compiled",
        )
        flat, exp_avg, exp_avg_sq, adam_steps = (
            state.flat,
            state.exp_avg,
            state.exp_avg_sq,
            state.adam_steps,
        )

        def logits_of() -> tuple[torch.Tensor, torch.Tensor]:
            """The scores at the weights now in ``flat``, computed at the batch's precision and
            returned in ``flat``'s dtype, and the leaf they were computed from (``flat``'s memory; a
            leaf per forward, so that autograd ties its gradient to the stream this forward runs
            on)."""
            leaf = flat.detach().requires_grad_(True)
            weights = dict(zip(self.keys, self.unflatten(leaf), strict=True))
            with bf16_autocast(flat.device, self.precision):
                scores = back(weights, dec1, enc2, enc1, x1_size, input_size)
            return scores.to(flat.dtype), leaf

        logits, leaf = logits_of()
        with torch.no_grad():
            initial = objective.miou(logits)
        progress = _Progress(
            initial,
            state.threshold,
            state.max_updates,
            flat=flat,
            adam=(exp_avg, exp_avg_sq, adam_steps) if self.restore_adam else None,
        )

        def update(logits: torch.Tensor, leaf: torch.Tensor) -> bool:
            """One Adam step of the sessions still training, on the gradient at ``logits`` (computed
            from ``leaf``); False (and no step) where the host checks and none trains."""
            progress.limit()
            if self.check_on_host and not bool(progress.active.any()):
                return False
            (grad,) = torch.autograd.grad(objective.loss(logits), [leaf])
            with torch.no_grad():
                adam_steps.add_(progress.active.to(flat.dtype))
                self._adam_step(state, grad, progress.active)
                progress.updated.copy_(progress.active)
            return True

        def evaluate() -> tuple[torch.Tensor, torch.Tensor]:
            logits, leaf = logits_of()
            with torch.no_grad():
                progress.record(objective.miou(logits), flat, (exp_avg, exp_avg_sq, adam_steps))
            return logits, leaf

        trained = self.most > 0 and update(logits, leaf)
        # the first forward's autograd graph, not kept through the later steps
        del logits, leaf
        for _ in range(self.most - 1 if trained else 0):
            if not update(*evaluate()):
                trained = False
                break
        if trained:
            evaluate()
        with torch.no_grad():
            metric = progress.finish(flat, (exp_avg, exp_avg_sq, adam_steps))
            state.summary.copy_(
                torch.stack(
                    [
                        initial.double(),
                        metric.double(),
                        progress.steps.double(),
                        adam_steps.double(),
                    ]
                )
            )

    def _front(
        self, x: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[int, int], tuple[int, int]]:
        with torch.no_grad():
            front = per_frame_front(self.reference, x)
        return front.dec1, front.enc2, front.enc1, front.x1_size, front.input_size

    def _adam_step(self, state: _BatchState, grad: torch.Tensor, active: torch.Tensor) -> None:
        """torch.optim.Adam's update (no weight decay, no AMSGrad) of the ``active`` sessions' rows
        of the weights and of Adam's moments, in place."""
        flat, exp_avg, exp_avg_sq = state.flat, state.exp_avg, state.exp_avg_sq
        counted = state.adam_steps.clamp(min=1.0)
        bias_correction1 = 1 - self.beta1**counted
        bias_correction2_sqrt = (1 - self.beta2**counted).sqrt()
        step_size = (state.learning_rate / bias_correction1).view(-1, 1)
        rows = active.view(-1, 1)
        new_avg = exp_avg.lerp(grad, 1 - self.beta1)
        new_avg_sq = exp_avg_sq * self.beta2 + (1 - self.beta2) * grad * grad
        denom = new_avg_sq.sqrt() / bias_correction2_sqrt.view(-1, 1) + self.eps
        flat.copy_(torch.where(rows, flat - step_size * new_avg / denom, flat))
        exp_avg.copy_(torch.where(rows, new_avg, exp_avg))
        exp_avg_sq.copy_(torch.where(rows, new_avg_sq, exp_avg_sq))


class _BatchedRun:
    """One group's Algorithm 1: every session's trainable weights and Adam moments as one row of a
    flat ``(sessions, weights)`` tensor (so that an Adam step is a handful of kernels whatever the
    sessions), every distiller updated on return."""

    def __init__(
        self,
        distillers: list[Distiller],
        key_frames: list[PreparedKeyFrame],
        convolution: Convolution,
        *,
        graphs: bool,
        objective: Objective,
        group: tuple[object, ...],
    ) -> None:
        self.distillers = distillers
        self.graphs = graphs
        self.group = group
        self.device = distillers[0].device
        reference = distillers[0].student
        keys = tuple(distillers[0].trainable_keys)
        self.parameters = [d.trainable.parameters for d in distillers]
        self.key_frames = key_frames
        self.dtype = key_frames[0].x.dtype
        layout = distillers[0].trainable
        groups = [d.optimizer.param_groups for d in distillers]
        for group_params in groups:
            _check_plain_adam(group_params)
        betas = groups[0][0]["betas"]
        self.learning_rates = [float(g[0]["lr"]) for g in groups]
        self.max_updates = [d.params.max_updates for d in distillers]
        self.precision = distillers[0].precision
        self.training = _Training(
            reference=reference,
            keys=keys,
            shapes=tuple(tuple(p.shape) for p in layout.parameters),
            sizes=tuple(layout.sizes),
            beta1=float(betas[0]),
            beta2=float(betas[1]),
            eps=float(groups[0][0]["eps"]),
            restore_adam=distillers[0].params.restore == "weights+adam",
            convolution=convolution,
            objective=objective,
            fuse_tail=distillers[0].fuse_tail,
            precision=distillers[0].precision,
            most=max(self.max_updates, default=0),
            check_on_host=stops_early_on_host(self.device),
        )

    def _per_session(self, values: Sequence[float]) -> torch.Tensor:
        return torch.tensor(values, dtype=self.dtype, device=self.device)

    def _state(self) -> _BatchState:
        """The batch's :class:`_BatchState`: its key frames stacked, and the weights, Adam's two
        moments (zero for a session without them) and step counts of every session, one row per
        session (:class:`~shadowtutor.algorithms.flat_trainable.FlatTrainable`)."""
        trainables = [d.trainable for d in self.distillers]
        flat = torch.stack([t.weights_now() for t in trainables])
        zeros: torch.Tensor | None = None
        moments: list[torch.Tensor] = []
        steps: list[float] = []
        for trainable in trainables:
            found = trainable.moments_now()
            if found is None:
                zeros = torch.zeros_like(trainable.moments) if zeros is None else zeros
                moments.append(zeros)
                steps.append(0.0)
            else:
                moments.append(found[0])
                steps.append(found[1])
        exp_avg, exp_avg_sq = torch.stack(moments, dim=1)
        return _BatchState(
            x=torch.cat([k.x for k in self.key_frames]),
            target=torch.stack([k.target for k in self.key_frames]),
            weights=torch.stack([k.weights for k in self.key_frames]),
            flat=flat,
            exp_avg=exp_avg,
            exp_avg_sq=exp_avg_sq,
            adam_steps=self._per_session(steps),
            learning_rate=self._per_session(self.learning_rates),
            threshold=self._per_session([d.params.threshold for d in self.distillers]),
            max_updates=torch.tensor(self.max_updates, device=self.device),
            summary=torch.zeros(4, len(trainables), dtype=torch.float64, device=self.device),
        )

    def run(self) -> list[DistillResult]:
        with float32_precision(self.device, training_float32(self.precision)):
            return self._run()

    def _run(self) -> list[DistillResult]:
        for distiller in self.distillers:
            _in_training_mode(distiller.student)
        state = self._state()
        if replays_batches(self.device, self.graphs):
            key = (self.group, len(self.distillers), str(self.dtype), self.training.shape_key())
            state, _ = train_graphed(key, self.training, state, self.device)
        else:
            self.training(state)
        with torch.no_grad():
            self._scatter(state.flat, state.exp_avg, state.exp_avg_sq)
            summary, stacked = to_host(
                [state.summary, torch.stack([state.flat, state.exp_avg, state.exp_avg_sq]).detach()]
            )
            # each session's weights and moments in a block of its own: a result never holds the
            # whole batch's memory (page-locked here), nor makes torch.save of its tensors write
            # every session's
            sessions = [
                self._by_key(stacked[:, index].clone()) for index in range(len(self.distillers))
            ]
        initial_h, metric_h, steps_h, adam_h = summary.tolist()
        self._write_steps(adam_h)
        return [
            DistillResult(
                metric=m,
                initial_metric=i,
                steps=int(s),
                weights=weights,
                optimizer_state=self._optimizer_state(index, avg, avg_sq, count),
            )
            for index, (i, m, s, count, (weights, avg, avg_sq)) in enumerate(
                zip(initial_h, metric_h, steps_h, adam_h, sessions, strict=True)
            )
        ]

    def _by_key(self, block: torch.Tensor) -> tuple[dict[str, torch.Tensor], ...]:
        """One session's weights, ``exp_avg`` and ``exp_avg_sq`` ``block (3, weights)`` as three
        dicts of views of it by state-dict key, each tensor shaped as its parameter."""
        parts = torch.split(block, list(self.training.sizes), dim=1)
        kinds = [
            part.view(3, *shape).unbind(0)
            for part, shape in zip(parts, self.training.shapes, strict=True)
        ]
        return tuple(
            dict(zip(self.training.keys, tensors, strict=True))
            for tensors in zip(*kinds, strict=True)
        )

    def _optimizer_state(
        self,
        index: int,
        avg: dict[str, torch.Tensor],
        avg_sq: dict[str, torch.Tensor],
        count: float,
    ) -> dict[str, Any]:
        """Session ``index``'s ``optimizer.state_dict()`` as :meth:`_scatter` and
        :meth:`_write_steps` left it, with its moments taken from their host copies ``avg`` and
        ``avg_sq`` (by state-dict key) and its step counts ``count`` (in tensors of their own, as
        Adam keeps them)."""
        distiller = self.distillers[index]
        names = {
            id(p): key for key, p in zip(self.training.keys, self.parameters[index], strict=True)
        }
        params = distiller.optimizer.param_groups[0]["params"]
        # its per-parameter entries are the live ones: not changed here
        packed = distiller.optimizer.state_dict()
        steps = iter(
            torch.full(
                (len(packed["state"]),), count, dtype=distiller.trainable.steps.dtype
            ).unbind(0)
        )
        state = {
            number: {
                **entry,
                "step": next(steps),
                "exp_avg": avg[names[id(params[number])]],
                "exp_avg_sq": avg_sq[names[id(params[number])]],
            }
            for number, entry in packed["state"].items()
        }
        return {"state": state, "param_groups": packed["param_groups"]}

    def _scatter(self, flat: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor) -> None:
        """Write every session's weights and Adam moments back into its flat tensors, which its
        student and optimiser hold views of."""
        trainables = [d.trainable for d in self.distillers]
        targets = [t.weights for t in trainables] + [
            row for t in trainables for row in t.moment_rows
        ]
        moments = [
            row
            for pair in zip(exp_avg.detach().unbind(0), exp_avg_sq.detach().unbind(0), strict=True)
            for row in pair
        ]
        torch._foreach_copy_(targets, [*flat.detach().unbind(0), *moments])

    def _write_steps(self, adam_steps: list[float]) -> None:
        """Set each optimiser's step count (on the host, as Adam keeps it); drop the state of a
        session that never stepped, as a fresh Adam has none."""
        for distiller, count in zip(self.distillers, adam_steps, strict=True):
            distiller.trainable.set_steps(count)


class _Progress:
    """Algorithm 1's bookkeeping of one batch, per session, as tensors on the device that change in
    place only (a step captured as a CUDA graph replays on the memory it saw): the metric, the best
    metric and the weights (and, restoring them, Adam's state) that reached it, which sessions still
    train, which passed THRESHOLD, the steps taken, and which sessions the last update stepped."""

    def __init__(
        self,
        initial: torch.Tensor,
        threshold: torch.Tensor,
        max_updates: torch.Tensor,
        *,
        flat: torch.Tensor,
        adam: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
    ) -> None:
        """``initial``: the metrics before any step ``(S,)``; ``adam``: the moments and step counts
        to restore with the weights (None: the weights alone)."""
        sessions = initial.shape[0]
        self.threshold, self.max_updates = threshold, max_updates
        self.metric, self.best = initial.clone(), initial.clone()
        # a first metric at THRESHOLD ends Algorithm 1 with no step
        self.active = initial < threshold
        self.started = self.active.clone()
        self.hit = torch.zeros(sessions, dtype=torch.bool, device=initial.device)
        self.updated = torch.zeros(sessions, dtype=torch.bool, device=initial.device)
        self.steps = torch.zeros(sessions, dtype=torch.long, device=initial.device)
        self.update_index = torch.zeros((), dtype=torch.long, device=initial.device)
        self.best_flat = flat.detach().clone()
        self.best_adam = None if adam is None else tuple(t.clone() for t in adam)

    def limit(self) -> None:
        """Before an update: sessions that took MAX_UPDATES steps stop training."""
        self.active &= self.update_index < self.max_updates
        self.update_index += 1

    def record(
        self,
        new_metric: torch.Tensor,
        flat: torch.Tensor,
        adam: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    ) -> None:
        """The metrics after the last update at weights ``flat`` and Adam state ``adam``: the
        updated sessions' metric and step count, whether they passed THRESHOLD (and stop), and their
        best so far."""
        updated = self.updated
        self.metric.copy_(torch.where(updated, new_metric, self.metric))
        self.steps += updated.long()
        passed = updated & (new_metric > self.threshold)
        improved = updated & ~passed & (new_metric > self.best)
        self.best.copy_(torch.where(improved, new_metric, self.best))
        rows = improved.view(-1, 1)
        self.best_flat.copy_(torch.where(rows, flat, self.best_flat))
        if self.best_adam is not None:
            for best, now in zip(self.best_adam, adam, strict=True):
                best.copy_(torch.where(rows if best.dim() == 2 else improved, now, best))
        self.hit |= passed
        self.active &= ~passed

    def finish(
        self, flat: torch.Tensor, adam: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    ) -> torch.Tensor:
        """Restore the best weights (and Adam state) of the sessions that trained, never passed
        THRESHOLD and ended below their best, in place; returns the final metrics ``(S,)``."""
        roll_back = self.started & ~self.hit & (self.metric < self.best)
        rows = roll_back.view(-1, 1)
        flat.copy_(torch.where(rows, self.best_flat, flat))
        if self.best_adam is not None:
            for best, now in zip(self.best_adam, adam, strict=True):
                now.copy_(torch.where(rows if best.dim() == 2 else roll_back, best, now))
        return torch.where(roll_back, self.best, self.metric)


GraphOutcome = Literal["eager", "captured", "replayed", "failed"]
"""How :func:`train_graphed` trained a batch: eagerly (a shape the thread's last batch did not
have), eagerly and then captured, by replaying the graph captured for its shape, or eagerly after a
failed capture."""

# per engine thread: a captured batch's graph and memory are for one batch at a time
_graphs = threading.local()


@dataclass(kw_only=True)
class _CapturedBatch:
    """A batch captured as a CUDA graph: its shape's key, the graph, the state its replays read and
    write, and the training it replays (which keeps the front's weights the graph reads alive)."""

    key: tuple[object, ...]
    graph: Any
    state: _BatchState
    training: _Training


def train_graphed(
    key: tuple[object, ...], training: _Training, state: _BatchState, device: torch.device
) -> tuple[_BatchState, GraphOutcome]:
    """``training(state)`` on the CUDA ``device``, through a CUDA graph where this thread has one
    for ``key`` (the batch's group, session count and training): ``state``'s values are copied into
    the captured batch's state and the graph replays the whole batch, the host's cost of Python,
    autograd and every kernel launch gone. A batch whose key is the same as this thread's last
    batch's, with no graph yet, trains eagerly and is then captured
    (:func:`~shadowtutor.algorithms.step_graph.capture`, replacing the thread's last graph and its
    memory); any other trains eagerly, as does a key whose capture failed once. Returns the state
    that holds the results (``state`` or the captured batch's) and how the batch was trained."""
    captured: _CapturedBatch | None = getattr(_graphs, "captured", None)
    if captured is not None and captured.key == key:
        captured.state.copy_(state)
        captured.graph.replay()
        return captured.state, "replayed"
    previous = getattr(_graphs, "previous", None)
    _graphs.previous = key
    failed: set[tuple[object, ...]] = _graphs.__dict__.setdefault("failed", set())
    if key != previous or key in failed:
        training(state)
        return state, "eager"
    # the last shape's graph and memory go before this one's capture
    _graphs.captured = None
    graph = capture(lambda: training(state), device)
    if graph is None:
        failed.add(key)
        return state, "failed"
    _graphs.captured = _CapturedBatch(key=key, graph=graph, state=state, training=training)
    return state, "captured"


def release_graphs() -> None:
    """Drop this thread's captured batch (its graph and device memory) and its memory of the last
    batch's shape."""
    _graphs.__dict__.clear()


def _in_training_mode(student: StudentNet) -> None:
    """Put ``student`` in training mode, as :meth:`Distiller.train` leaves it, unless its root
    module is in it already (its modules change modes together, through ``train()`` and ``eval()``;
    a student in training mode is not walked again). No mode changes what a batch computes: the
    student's normalisation keeps no running statistics."""
    if not student.training:
        student.train()


def _check_plain_adam(param_groups: list[dict[str, object]]) -> None:
    """The batched update is Adam without weight decay, AMSGrad or maximisation, in one parameter
    group."""
    if len(param_groups) != 1:
        raise ValueError("batched distillation needs an optimiser with one parameter group")
    group = param_groups[0]
    if group.get("weight_decay", 0) or group.get("amsgrad", False) or group.get("maximize", False):
        raise ValueError(
            "batched distillation implements plain Adam (no weight decay, AMSGrad or maximize)"
        )
