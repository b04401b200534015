"""Algorithm 1 for many sessions at once: one batched run per group of compatible key frames.

:func:`distill_batch` takes one key frame for each of several :class:`Distiller` s and leaves every
distiller as its own :meth:`Distiller.train` would have (the same step count, metric and restore; the
weights and Adam's state equal within float rounding), with the work of the whole group issued as
one batch:

* the frozen front runs once for the group's frames (its weights are shared: every session of a
  group has the same front), each frame normalised with its own statistics as at batch 1;
* each session's trainable back runs with its own weights, stacked along a leading session axis
  (``torch.func.functional_call`` under ``torch.func.vmap``: grouped convolutions underneath);
* one Adam per session on the stacked tensors, with per-session step counts, learning rates and
  a mask of the sessions still training;
* early stop at THRESHOLD, MAX_UPDATES and the restore of the best student are masks on the
  device: the loop reads nothing back from the device until it ends, then moves the metrics and
  step counts to the host in one transfer.

Key frames can be grouped when their distillers train in partial mode at the same student input
size, class count, restore rule, tail (as written or fused) and precision, on the same device, with
fronts of equal weights; anything else runs through its own :meth:`Distiller.train`. A group trains at
its distillers' precision, as :meth:`Distiller.train` does. Each group trains the
tail its distillers train. ``convolution`` picks how the sessions' own convolutions run: ``grouped`` (one
grouped convolution, as ``vmap`` makes it) or ``matmul`` (im2col and one batched matrix product,
:mod:`~shadowtutor.algorithms.conv_matmul`); the same function either way, rounded differently.
``graphs`` replays the steps on a CUDA device as one captured CUDA graph, which removes the host's cost of
every step but the first two (Python, ``vmap``, autograd, kernel launches); the bookkeeping is in place for
that reason, the same on every device.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, vmap

from shadowtutor.algorithms.batched_objective import BatchedObjective
from shadowtutor.algorithms.conv_matmul import ConvolutionsAsMatmul
from shadowtutor.algorithms.distill import Distiller, DistillResult, HostKeyFrame, PreparedKeyFrame
from shadowtutor.algorithms.engine_options import CONVOLUTIONS, OBJECTIVES, Convolution, Objective
from shadowtutor.algorithms.step_graph import replay_step
from shadowtutor.models.fast_student import frame_tail_fusable, fused_back, fused_back_scores
from shadowtutor.models.precision import float32_precision
from shadowtutor.models.student import FRONT_MODULES, FrontFeatures, StudentNet, map_sizes


@dataclass
class KeyFrameJob:
    """One session's key frame ready for Algorithm 1: its distiller and the key frame as that distiller prepared
    it on the host (:meth:`Distiller.prepare_on_host`: at the student's size, with the loss's weights);
    :func:`distill_batch` uploads it."""

    distiller: Distiller
    key_frame: HostKeyFrame

    @classmethod
    def prepare(
        cls, distiller: Distiller, frame_bgr: np.ndarray, label: np.ndarray, boxes: np.ndarray | None = None
    ) -> KeyFrameJob:
        """The job of a BGR frame ``(H, W, 3)`` uint8, the teacher's labels ``(H, W)`` and, where the teacher gives
        them, its instance boxes ``(N, 4)``; ValueError where the frame and the labels differ in size. Changes no
        distiller, so it may run in any thread while the distiller trains on nothing else."""
        return cls(distiller, distiller.prepare_on_host(frame_bgr, label, boxes))


def front_fingerprint(distiller: Distiller) -> str:
    """A digest of the distiller's frozen front weights (computed once per distiller, then cached on it)."""
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
    """What key frames must share to run in one batch; None: this one runs on its own."""
    if distiller.params.mode != "partial":
        return None
    return (
        tuple(key_frame.x.shape), distiller.student.num_classes, distiller.params.restore, distiller.fuse_tail,
        distiller.precision, str(distiller.device), front_fingerprint(distiller),
    )


def distill_batch(
    jobs: Sequence[KeyFrameJob], convolution: Convolution = "grouped", graphs: bool = False,
    objective: Objective = "eager",
) -> list[DistillResult]:
    """Algorithm 1 on every job, compatible ones batched (their convolutions computed as ``convolution``
    says, their loss and metric as ``objective`` says: :class:`~shadowtutor.algorithms.batched_objective.
    BatchedObjective`; with ``graphs``, on a CUDA device, every step after the second replayed as one CUDA
    graph: :func:`~shadowtutor.algorithms.step_graph.replay_step`, the same arithmetic); results in the order
    of ``jobs``.

    Each distiller may appear once (its key frames depend on each other: ValueError otherwise); an unknown
    ``convolution`` or ``objective`` raises ValueError before any distiller changes.
    """
    if convolution not in CONVOLUTIONS:
        raise ValueError(f"unknown convolution {convolution!r}; use one of {', '.join(CONVOLUTIONS)}")
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
    for indices in groups.values():
        if len(indices) == 1:
            alone.extend(indices)
            continue
        run = _BatchedRun([distillers[i] for i in indices], [prepared[i] for i in indices], convolution, graphs,
                          objective)
        group_results = run.run()
        for index, result in zip(indices, group_results, strict=True):
            results[index] = result
    for index in alone:
        results[index] = distillers[index].train_prepared(prepared[index])
    return [r for r in results if r is not None]


class _Back(nn.Module):
    """The student's trainable back as a module of one frame's front features (for ``functional_call``), with
    the tail as written or fused (:func:`~shadowtutor.models.fast_student.fused_back`); with ``scores_only``
    (fused tails only) it stops before the last upsampling to the frame
    (:func:`~shadowtutor.models.fast_student.fused_back_scores`)."""

    def __init__(
        self, student: StudentNet, x1_size: tuple[int, int], input_size: tuple[int, int], fuse_tail: bool,
        scores_only: bool,
    ) -> None:
        super().__init__()
        self.student = student
        self.x1_size = x1_size
        self.input_size = input_size
        self.fuse_tail = fuse_tail
        self.scores_only = scores_only

    def forward(self, dec1: torch.Tensor, enc2: torch.Tensor, enc1: torch.Tensor) -> torch.Tensor:
        front = FrontFeatures(dec1[None], enc2[None], enc1[None], self.x1_size, self.input_size)
        if self.scores_only:
            logits = fused_back_scores(self.student, front)
        else:
            logits = fused_back(self.student, front) if self.fuse_tail else self.student.forward_back(front)
        return logits.squeeze(0)  # not [0], whose backward writes a zero-filled copy of the gradient


def stops_early_on_host(device: torch.device) -> bool:
    """Whether a batch reads back, after each step, whether any session still trains, to stop as soon as none
    does: on a CPU, where reading it costs nothing; not on an accelerator, where it would wait for the device
    to finish the step (there every batch runs MAX_UPDATES steps, the finished sessions masked)."""
    return device.type == "cpu"


def replays_steps(device: torch.device, graphs: bool) -> bool:
    """Whether a batch replays its steps as a CUDA graph: where asked to, on a CUDA device."""
    return graphs and device.type == "cuda"


class _BatchedRun:
    """One group's Algorithm 1: every session's trainable weights and Adam moments as one row of a flat
    ``(sessions, weights)`` tensor (so that an Adam step is a handful of kernels whatever the sessions), every
    distiller updated on return."""

    def __init__(
        self, distillers: list[Distiller], key_frames: list[PreparedKeyFrame], convolution: Convolution,
        graphs: bool, objective: Objective,
    ) -> None:
        self.distillers = distillers
        self.convolution = convolution
        self.graphs = graphs
        self.objective = objective
        self.device = distillers[0].device
        self.reference = distillers[0].student
        self.keys = distillers[0].trainable_keys
        self.parameters = [_trainable_parameters(d, self.keys) for d in distillers]
        self.x = torch.cat([k.x for k in key_frames])
        self.target = torch.stack([k.target for k in key_frames])
        self.weights = torch.stack([k.weights for k in key_frames])
        self.num_classes = self.reference.num_classes
        self.dtype = self.x.dtype
        named = dict(self.reference.named_parameters())
        self.shapes = [tuple(named[key].shape) for key in self.keys]
        self.sizes = [named[key].numel() for key in self.keys]
        groups = [d.optimizer.param_groups for d in distillers]
        for group in groups:
            _check_plain_adam(group)
        betas = groups[0][0]["betas"]
        self.beta1, self.beta2, self.eps = float(betas[0]), float(betas[1]), float(groups[0][0]["eps"])
        self.learning_rate = self._per_session([g[0]["lr"] for g in groups])
        self.threshold = self._per_session([d.params.threshold for d in distillers])
        self.max_updates = [d.params.max_updates for d in distillers]
        self.restore_adam = distillers[0].params.restore == "weights+adam"
        self.precision = distillers[0].precision

    def _per_session(self, values: Sequence[float]) -> torch.Tensor:
        return torch.tensor(values, dtype=self.dtype, device=self.device)

    def _front(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, tuple[int, int], tuple[int, int]]:
        student = self.reference

        def one_frame(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            front = student.forward_front(x[None])
            return front.dec1[0], front.enc2[0], front.enc1[0]

        with torch.no_grad():
            dec1, enc2, enc1 = vmap(one_frame)(self.x)
        input_size = (self.x.shape[2], self.x.shape[3])
        return dec1, enc2, enc1, map_sizes(input_size)["x1"], input_size

    def _unflatten(self, flat: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Views of ``flat (S, weights)`` shaped as the stacked trainable tensors ``(S, *shape)``, in key order."""
        parts = torch.split(flat, self.sizes, dim=1)
        return tuple(part.view(-1, *shape) for part, shape in zip(parts, self.shapes, strict=True))

    def _session_rows(self, flat: torch.Tensor) -> list[tuple[torch.Tensor, ...]]:
        """Per trainable tensor (in key order), its view in every session's row of ``flat (S, weights)``."""
        return [part.unbind(0) for part in self._unflatten(flat)]

    def _gather(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """The flat weights, Adam's two flat moments (zero for a parameter without them) and the step counts, copied
        from every session in one multi-tensor copy."""
        sessions, width = len(self.distillers), sum(self.sizes)
        flat = torch.empty(sessions, width, dtype=self.dtype, device=self.device)
        exp_avg, exp_avg_sq = torch.zeros_like(flat), torch.zeros_like(flat)
        rows = [self._session_rows(t) for t in (flat, exp_avg, exp_avg_sq)]
        targets: list[torch.Tensor] = []
        sources: list[torch.Tensor] = []
        steps = []
        for index, (distiller, parameters) in enumerate(zip(self.distillers, self.parameters, strict=True)):
            state = distiller.optimizer.state
            for number, parameter in enumerate(parameters):
                targets.append(rows[0][number][index])
                sources.append(parameter.detach())
                entry = state.get(parameter, {})
                for moments, name in ((rows[1], "exp_avg"), (rows[2], "exp_avg_sq")):
                    if name in entry:
                        targets.append(moments[number][index])
                        sources.append(entry[name])
            first = state.get(parameters[0], {})
            steps.append(float(first["step"]) if "step" in first else 0.0)
        torch._foreach_copy_(targets, sources)
        return flat, exp_avg, exp_avg_sq, self._per_session(steps)

    def run(self) -> list[DistillResult]:
        with float32_precision(self.device, self.precision):
            return self._run()

    def _run(self) -> list[DistillResult]:
        for distiller in self.distillers:
            distiller.student.train()
        dec1, enc2, enc1, x1_size, input_size = self._front()
        fuse_tail = self.distillers[0].fuse_tail
        scores_only = fuse_tail and frame_tail_fusable(*input_size)
        back = _Back(self.reference, x1_size, input_size, fuse_tail, scores_only)
        objective = BatchedObjective(self.target, self.weights, self.num_classes,
                                     input_size if scores_only else None, self.objective == "compiled")
        names = [f"student.{key}" for key in self.keys]

        def forward_one(weights: tuple[torch.Tensor, ...], d1: torch.Tensor, e2: torch.Tensor,
                        e1: torch.Tensor) -> torch.Tensor:
            return functional_call(back, dict(zip(names, weights, strict=True)), (d1, e2, e1), strict=False)

        forward = vmap(forward_one)
        flat, exp_avg, exp_avg_sq, adam_steps = self._gather()

        def logits_of() -> tuple[torch.Tensor, torch.Tensor]:
            """The logits at the weights now in ``flat``, and the leaf they were computed from (``flat``'s memory;
            a leaf per forward, so that autograd ties its gradient to the stream this forward runs on)."""
            leaf = flat.detach().requires_grad_(True)
            with ConvolutionsAsMatmul() if self.convolution == "matmul" else contextlib.nullcontext():
                return forward(self._unflatten(leaf), dec1, enc2, enc1), leaf

        logits, leaf = logits_of()
        with torch.no_grad():
            initial = objective.miou(logits)
        progress = _Progress(initial, self.threshold, torch.tensor(self.max_updates, device=self.device), flat,
                             (exp_avg, exp_avg_sq, adam_steps) if self.restore_adam else None)
        check_on_host = stops_early_on_host(self.device)

        def update(logits: torch.Tensor, leaf: torch.Tensor) -> bool:
            """One Adam step of the sessions still training, on the gradient at ``logits`` (computed from
            ``leaf``); False (and no step) where the host checks and none trains."""
            progress.limit()
            if check_on_host and not bool(progress.active.any()):
                return False
            (grad,) = torch.autograd.grad(objective.loss(logits), [leaf])
            with torch.no_grad():
                adam_steps.add_(progress.active.to(self.dtype))
                self._adam_step(flat, exp_avg, exp_avg_sq, grad, adam_steps, progress.active)
                progress.updated.copy_(progress.active)
            return True

        def evaluate() -> tuple[torch.Tensor, torch.Tensor]:
            logits, leaf = logits_of()
            with torch.no_grad():
                progress.record(objective.miou(logits), flat,
                                (exp_avg, exp_avg_sq, adam_steps))
            return logits, leaf

        most = max(self.max_updates, default=0)
        trained = most > 0 and update(logits, leaf)
        del logits, leaf  # the first forward's autograd graph, not kept through the later steps
        if trained and replays_steps(self.device, self.graphs):
            replay_step(lambda: update(*evaluate()), most - 1, self.device)
        else:
            for _ in range(most - 1 if trained else 0):
                if not update(*evaluate()):
                    trained = False
                    break
        if trained:
            evaluate()
        with torch.no_grad():
            metric = progress.finish(flat, (exp_avg, exp_avg_sq, adam_steps))
            self._scatter(flat, exp_avg, exp_avg_sq)
            summary = torch.stack([initial.double(), metric.double(), progress.steps.double(),
                                   adam_steps.double()])
            summary, state = _to_host([summary, torch.stack([flat, exp_avg, exp_avg_sq]).detach()])
            # each session's weights and moments in a block of its own: a result never holds the whole batch's
            # memory (page-locked here), nor makes torch.save of its tensors write every session's
            sessions = [self._unflatten(state[:, index].clone()) for index in range(len(self.distillers))]
        initial_h, metric_h, steps_h, adam_h = summary.tolist()
        self._write_steps(adam_h)
        return [
            DistillResult(metric=m, initial_metric=i, steps=int(s), weights=self._row(session, 0),
                          optimizer_state=self._optimizer_state(index, self._row(session, 1), self._row(session, 2)))
            for index, (i, m, s, session) in enumerate(zip(initial_h, metric_h, steps_h, sessions, strict=True))
        ]

    def _row(self, stacked: tuple[torch.Tensor, ...], index: int) -> dict[str, torch.Tensor]:
        """Row ``index`` of the tensors ``stacked`` (as :meth:`_unflatten` gives them), by state-dict key."""
        return {key: tensor[index] for key, tensor in zip(self.keys, stacked, strict=True)}

    def _optimizer_state(
        self, index: int, avg: dict[str, torch.Tensor], avg_sq: dict[str, torch.Tensor]
    ) -> dict[str, Any]:
        """Session ``index``'s ``optimizer.state_dict()`` as :meth:`_scatter` and :meth:`_write_steps` left it, with
        its moments taken from their host copies ``avg`` and ``avg_sq`` (by state-dict key) and its step counts
        copied."""
        distiller = self.distillers[index]
        names = {id(p): key for key, p in zip(self.keys, self.parameters[index], strict=True)}
        params = distiller.optimizer.param_groups[0]["params"]
        packed = distiller.optimizer.state_dict()  # its per-parameter entries are the live ones: not changed here
        state = {number: {**entry, "step": entry["step"].clone(), "exp_avg": avg[names[id(params[number])]],
                          "exp_avg_sq": avg_sq[names[id(params[number])]]}
                 for number, entry in packed["state"].items()}
        return {"state": state, "param_groups": packed["param_groups"]}

    def _adam_step(
        self, flat: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor, grad: torch.Tensor,
        adam_steps: torch.Tensor, active: torch.Tensor,
    ) -> None:
        """torch.optim.Adam's update (no weight decay, no AMSGrad) of the ``active`` sessions' rows of ``flat`` and
        of Adam's moments, in place."""
        counted = adam_steps.clamp(min=1.0)
        bias_correction1 = 1 - self.beta1 ** counted
        bias_correction2_sqrt = (1 - self.beta2 ** counted).sqrt()
        step_size = (self.learning_rate / bias_correction1).view(-1, 1)
        rows = active.view(-1, 1)
        new_avg = exp_avg.lerp(grad, 1 - self.beta1)
        new_avg_sq = exp_avg_sq * self.beta2 + (1 - self.beta2) * grad * grad
        denom = new_avg_sq.sqrt() / bias_correction2_sqrt.view(-1, 1) + self.eps
        flat.copy_(torch.where(rows, flat - step_size * new_avg / denom, flat))
        exp_avg.copy_(torch.where(rows, new_avg, exp_avg))
        exp_avg_sq.copy_(torch.where(rows, new_avg_sq, exp_avg_sq))

    def _scatter(self, flat: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor) -> None:
        """Write every session's weights and Adam moments back into its own student and optimiser."""
        targets: list[torch.Tensor] = []
        sources: list[torch.Tensor] = []
        stacked = [self._session_rows(t.detach()) for t in (flat, exp_avg, exp_avg_sq)]
        for index, (distiller, parameters) in enumerate(zip(self.distillers, self.parameters, strict=True)):
            state = distiller.optimizer.state
            for number, parameter in enumerate(parameters):
                entry = state[parameter]
                if "exp_avg" not in entry:  # written over below
                    entry["exp_avg"] = torch.empty_like(parameter, memory_format=torch.preserve_format)
                    entry["exp_avg_sq"] = torch.empty_like(parameter, memory_format=torch.preserve_format)
                targets += [parameter.data, entry["exp_avg"], entry["exp_avg_sq"]]
                sources += [stacked[0][number][index], stacked[1][number][index], stacked[2][number][index]]
        torch._foreach_copy_(targets, sources)

    def _write_steps(self, adam_steps: list[float]) -> None:
        """Set each optimiser's step count (on the host, as Adam keeps it); drop the state of a session that
        never stepped, as a fresh Adam has none."""
        for distiller, parameters, count in zip(self.distillers, self.parameters, adam_steps, strict=True):
            state = distiller.optimizer.state
            for parameter in parameters:
                if count == 0:
                    state.pop(parameter, None)
                else:
                    state[parameter]["step"] = torch.tensor(count, dtype=torch.get_default_dtype())


class _Progress:
    """Algorithm 1's bookkeeping of one batch, per session, as tensors on the device that change in place only
    (a step captured as a CUDA graph replays on the memory it saw): the metric, the best metric and the weights
    (and, restoring them, Adam's state) that reached it, which sessions still train, which passed THRESHOLD,
    the steps taken, and which sessions the last update stepped."""

    def __init__(self, initial: torch.Tensor, threshold: torch.Tensor, max_updates: torch.Tensor,
                 flat: torch.Tensor, adam: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None) -> None:
        """``initial``: the metrics before any step ``(S,)``; ``adam``: the moments and step counts to restore
        with the weights (None: the weights alone)."""
        sessions = initial.shape[0]
        self.threshold, self.max_updates = threshold, max_updates
        self.metric, self.best = initial.clone(), initial.clone()
        self.active = initial < threshold  # a first metric at THRESHOLD ends Algorithm 1 with no step
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

    def record(self, new_metric: torch.Tensor, flat: torch.Tensor,
               adam: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> None:
        """The metrics after the last update at weights ``flat`` and Adam state ``adam``: the updated sessions'
        metric and step count, whether they passed THRESHOLD (and stop), and their best so far."""
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

    def finish(self, flat: torch.Tensor, adam: tuple[torch.Tensor, torch.Tensor, torch.Tensor]) -> torch.Tensor:
        """Restore the best weights (and Adam state) of the sessions that trained, never passed THRESHOLD and
        ended below their best, in place; returns the final metrics ``(S,)``."""
        roll_back = self.started & ~self.hit & (self.metric < self.best)
        rows = roll_back.view(-1, 1)
        flat.copy_(torch.where(rows, self.best_flat, flat))
        if self.best_adam is not None:
            for best, now in zip(self.best_adam, adam, strict=True):
                now.copy_(torch.where(rows if best.dim() == 2 else roll_back, best, now))
        return torch.where(roll_back, self.best, self.metric)


def _to_host(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Host copies of ``tensors``, made in one wait: from a CUDA device through page-locked memory (several
    times the speed of a copy to pageable memory), from elsewhere as plain copies."""
    if not tensors or tensors[0].device.type != "cuda":
        return [t.to("cpu", copy=True) for t in tensors]
    copies = [torch.empty(t.shape, dtype=t.dtype, pin_memory=True) for t in tensors]
    for copy, tensor in zip(copies, tensors, strict=True):
        copy.copy_(tensor, non_blocking=True)
    torch.cuda.current_stream(tensors[0].device).synchronize()
    return copies


def _trainable_parameters(distiller: Distiller, keys: Sequence[str]) -> list[torch.Tensor]:
    """The distiller's trainable parameters in the order of ``keys`` (state-dict names)."""
    named = dict(distiller.student.named_parameters())
    return [named[key] for key in keys]


def _check_plain_adam(param_groups: list[dict[str, object]]) -> None:
    """The batched update is Adam without weight decay, AMSGrad or maximisation, in one parameter group."""
    if len(param_groups) != 1:
        raise ValueError("batched distillation needs an optimiser with one parameter group")
    group = param_groups[0]
    if group.get("weight_decay", 0) or group.get("amsgrad", False) or group.get("maximize", False):
        raise ValueError("batched distillation implements plain Adam (no weight decay, AMSGrad or maximize)")
