"""``shadowtutor bench regions``: the region flow path against the student alone (DVSNet, Table III style).

Every method labels the same frames, timed round-robin frame by frame (each frame goes
through every method before the next), so that load from other processes falls on all of
them alike; the speed-up is each method's FPS over the student's in the same run. Methods:

* ``student``: the student on every whole frame (the reference);
* ``dn@THR``: regions, the decision network with threshold THR picks the path (DVSNet's rule);
* ``budget@B``: regions, the decision network's predicted loss summed since the key is held
  within the budget B (:class:`~shadowtutor.acceleration.regions.labeller.BudgetPolicy`);
* ``fixed@K``: regions, each segmented every K frames and warped in between (DVSNet's baseline).

On generated scenes mIoU is against the truth; on real clips only agreement with the
student (fraction of pixels labelled alike) and speed are measured. Two side studies back
the design: the student's context (a region segmented alone vs cut from the whole frame)
and the flow method (DIS presets vs Farneback: time per region, agreement of warped labels).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import numpy as np

from shadowtutor.acceleration.regions.decision import DecisionNetwork
from shadowtutor.acceleration.regions.flow import FLOW_METHODS, FlowEstimator
from shadowtutor.acceleration.regions.grid import RegionGrid, crop, inner
from shadowtutor.acceleration.regions.labeller import (
    FLOW,
    BudgetPolicy,
    DecisionPolicy,
    FixedIntervalPolicy,
    FlowPathConfig,
    KeyFlows,
    RegionKey,
    RegionLabeller,
)
from shadowtutor.algorithms.metrics import miou
from shadowtutor_lab.regions.configs import RegionBenchConfig

Segment = Callable[[np.ndarray], np.ndarray]
STUDENT = "student"


def decision_name(threshold: float, max_age: int) -> str:
    return f"dn@{threshold:g}/age{max_age}"


def budget_name(budget: float, max_age: int) -> str:
    return f"budget@{budget:g}/age{max_age}"


def is_decision(name: str) -> bool:
    """Whether a method is chosen by the decision network (either rule)."""
    return name.startswith(("dn@", "budget@"))


def _labellers(segment: Segment, network: DecisionNetwork, config: RegionBenchConfig) -> dict[str, RegionLabeller]:
    labellers = {decision_name(t, age): RegionLabeller(segment, DecisionPolicy(network, t), config.regions,
                                                       max_key_age=age)
                 for t, age in config.decisions}
    labellers.update({budget_name(b, age): RegionLabeller(segment, BudgetPolicy(network, b), config.regions,
                                                          max_key_age=age)
                      for b, age in config.budgets})
    labellers.update({f"fixed@{k}": RegionLabeller(segment, FixedIntervalPolicy(k), config.regions, max_key_age=k)
                      for k in config.intervals})
    return labellers


def run_clip(frames: Iterable[np.ndarray], truth: Iterable[np.ndarray] | None, segment: Segment,
             network: DecisionNetwork, num_classes: int, config: RegionBenchConfig) -> dict[str, dict[str, Any]]:
    """Per method: seconds, frames, mean mIoU against ``truth`` (if given), agreement with the student."""
    return time_labellers(frames, truth, segment, _labellers(segment, network, config), num_classes, config.warmup)


def time_labellers(frames: Iterable[np.ndarray], truth: Iterable[np.ndarray] | None, segment: Segment,
                   labellers: dict[str, RegionLabeller], num_classes: int, warmup: int) -> dict[str, dict[str, Any]]:
    """:func:`run_clip` over given labellers: each frame goes through the student and every labeller in turn
    (round-robin, so the shared machine's speed changes reach all alike), timed after ``warmup`` frames."""
    methods: dict[str, Callable[[np.ndarray], np.ndarray]] = {STUDENT: segment}
    methods.update({name: labeller.label for name, labeller in labellers.items()})
    stats = {name: {"seconds": 0.0, "frames": 0, "miou": [], "agreement": [], "flow_regions": 0, "regions": 0}
             for name in methods}
    truths = iter(truth) if truth is not None else None
    for index, frame in enumerate(frames):
        label = next(truths) if truths is not None else None
        outputs = {}
        for name, method in methods.items():
            start = time.perf_counter()
            outputs[name] = method(frame)
            elapsed = time.perf_counter() - start
            s = stats[name]
            if index >= warmup:
                s["seconds"] += elapsed
                s["frames"] += 1
            if name in labellers:
                paths = labellers[name].last.paths  # type: ignore[union-attr]
                s["flow_regions"] += sum(p == FLOW for p in paths)
                s["regions"] += len(paths)
        for name, out in outputs.items():
            s = stats[name]
            s["agreement"].append(float((out == outputs[STUDENT]).mean()))
            if label is not None:
                s["miou"].append(miou(out, label, num_classes))
    return {name: {"seconds": s["seconds"], "frames": s["frames"],
                   "miou": float(np.mean(s["miou"])) if s["miou"] else None,
                   "agreement": float(np.mean(s["agreement"])),
                   "flow_fraction": s["flow_regions"] / s["regions"] if s["regions"] else 0.0}
            for name, s in stats.items()}


def summarise(clips: Sequence[dict[str, dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """Methods over several clips: FPS over all timed frames, mean mIoU and agreement over clips."""
    out: dict[str, dict[str, Any]] = {}
    for name in clips[0]:
        seconds = sum(c[name]["seconds"] for c in clips)
        frames = sum(c[name]["frames"] for c in clips)
        mious = [c[name]["miou"] for c in clips if c[name]["miou"] is not None]
        out[name] = {"fps": frames / seconds if seconds else 0.0,
                     "miou": float(np.mean(mious)) if mious else None,
                     "agreement": float(np.mean([c[name]["agreement"] for c in clips])),
                     "flow_fraction": float(np.mean([c[name]["flow_fraction"] for c in clips]))}
    base = out[STUDENT]["fps"]
    for row in out.values():
        row["speedup"] = row["fps"] / base if base else 0.0
    return out


def fixed_interval_at(summary: dict[str, dict[str, Any]], at: float, key: str = "miou",
                      along: str = "speedup") -> float | None:
    """The fixed-interval baseline's ``key`` where its ``along`` (speed-up or flow fraction) equals ``at``.

    Linearly interpolated between the fixed-interval runs; ``None`` outside them. Along the flow
    fraction the comparison is at an equal number of student calls, whatever the decision costs.
    """
    points = sorted((row[along], row[key]) for name, row in summary.items()
                    if name.startswith("fixed@") and row[key] is not None)
    if len(points) < 2 or not points[0][0] <= at <= points[-1][0]:
        return None
    return float(np.interp(at, [p[0] for p in points], [p[1] for p in points]))


def spliced(sources: Sequence[Iterable[Any]], frames: int, seed: int, shortest: int = 12,
            longest: int = 40) -> Iterator[Any]:
    """One clip cut from several of equal length: shots of ``shortest..longest`` frames, each from the next source.

    Frame t of the clip is frame t of its shot's source (all sources are read in step), so the
    same call on the scenes' frames and on their labels gives matching frames and truth.
    """
    rng = np.random.default_rng(seed)
    iterators = [iter(source) for source in sources]
    shot, left = 0, int(rng.integers(shortest, longest + 1))
    for _ in range(frames):
        items = [next(it) for it in iterators]
        if left == 0:
            shot, left = shot + 1, int(rng.integers(shortest, longest + 1))
        left -= 1
        yield items[shot % len(items)]


def context_study(frames: Sequence[np.ndarray], truth: Sequence[np.ndarray], segment: Segment, num_classes: int,
                  margins: Sequence[int] = (0, 32, 64, 96), regions: int = 4) -> list[dict[str, Any]]:
    """Regions segmented alone (with a margin) against cut from the whole frame's labels, and against the truth."""
    whole = [segment(f) for f in frames]
    rows = [{"context": "whole frame", "agreement": 1.0,
             "miou": float(np.mean([miou(w, t, num_classes) for w, t in zip(whole, truth, strict=True)]))}]
    for margin in margins:
        agreement, scores = [], []
        for frame, full, label in zip(frames, whole, truth, strict=True):
            grid = RegionGrid(width=frame.shape[1], height=frame.shape[0], regions=regions, margin=margin)
            out = np.empty_like(full)
            for r, box in enumerate(grid.boxes):
                context = grid.margin_box(r)
                labels = crop(segment(np.ascontiguousarray(crop(frame, context))), inner(box, context))
                out[box[1]:box[3], box[0]:box[2]] = labels
            agreement.append(float((out == full).mean()))
            scores.append(miou(out, label, num_classes))
        rows.append({"context": f"region + {margin} px", "agreement": float(np.mean(agreement)),
                     "miou": float(np.mean(scores))})
    return rows


# The flow study's variants: (method, scale, context). The context is what the flow is estimated over:
# the whole frame (the labeller's, when the regions share a path) or each region alone.
FLOW_STUDY = (
    *((method, 1.0, "frame") for method in FLOW_METHODS),
    ("dis-ultrafast", 0.5, "frame"), ("dis-medium", 0.5, "frame"),
    ("dis-ultrafast", 1.0, "region"), ("dis-ultrafast", 0.5, "region"),
)


def flow_study(frames: Sequence[np.ndarray], truth: Sequence[np.ndarray], segment: Segment,
               ages: Sequence[int] = (1, 2, 5), regions: int = 4) -> list[dict[str, Any]]:
    """Per flow variant: ms per frame (flow + warp of every region), and at each key age the agreement
    of the warped key labels with the student's labels now, and of the warped true labels with the truth."""
    labels = [segment(f) for f in frames]
    height, width = labels[0].shape
    whole = (0, 0, width, height)
    boxes = RegionGrid(width=width, height=height, regions=regions).boxes
    rows = []
    for method, scale, over in FLOW_STUDY:
        flow = FlowEstimator(method, scale)
        greys = [flow.small_grey(f) for f in frames]
        row: dict[str, Any] = {"method": method, "scale": scale, "context": over}
        times = []
        for age in ages:
            agree, true_agree = [], []
            for t in range(max(ages), len(frames)):
                k = t - age
                contexts = [whole if over == "frame" else box for box in boxes]
                frame_keys = [RegionKey.cut(flow, greys[k], crop(labels[k], context), context, box, k, 0)
                              for context, box in zip(contexts, boxes, strict=True)]
                start = time.perf_counter()
                flows = KeyFlows(flow, greys[t])
                warped = [flows.warped_labels(key) for key in frame_keys]
                times.append(time.perf_counter() - start)
                for key, labels_now in zip(frame_keys, warped, strict=True):
                    true_key = np.ascontiguousarray(crop(truth[t - age], key.context))
                    true_now = key.region_labels(flow.warp_labels(true_key, flows.result(key)))
                    agree.append(float((labels_now == crop(labels[t], key.region)).mean()))
                    true_agree.append(float((true_now == crop(truth[t], key.region)).mean()))
            row[f"agreement_age_{age}"] = float(np.mean(agree))
            row[f"truth_agreement_age_{age}"] = float(np.mean(true_agree))
        row["ms_per_frame"] = 1000 * float(np.mean(times))
        rows.append(row)
    return rows


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.2f}"


def group_table(summary: dict[str, dict[str, Any]]) -> list[str]:
    """One Table III-style table: a row per method."""
    base = summary[STUDENT]["miou"]
    key = "miou" if base is not None else "agreement"  # real videos have no truth
    what = "mIoU" if key == "miou" else "agreement"
    lines = ["| method | mIoU (%) | lost (points) | FPS | speed-up | regions warped (%) | agreement with student (%) "
             f"| fixed interval at this speed-up: {what} (%) | fixed interval at this warped fraction: {what} (%) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, row in summary.items():
        lost = "—" if base is None or row["miou"] is None else f"{100 * (base - row['miou']):.2f}"
        dn = is_decision(name)
        fixed = fixed_interval_at(summary, row["speedup"], key) if dn else None
        same_work = fixed_interval_at(summary, row["flow_fraction"], key, "flow_fraction") if dn else None
        lines.append(f"| {name} | {_pct(row['miou'])} | {lost} | {row['fps']:.1f} | {row['speedup']:.2f}x | "
                     f"{100 * row['flow_fraction']:.0f} | {_pct(row['agreement'])} | {_pct(fixed)} | "
                     f"{_pct(same_work)} |")
    return lines


def acceptance(summary: dict[str, dict[str, Any]], min_speedup: float = 2.0, max_lost: float = 0.03) -> list[str]:
    """The issue's target on one group: >= 2x the student's FPS at <= 3 mIoU points lost, DN against fixed."""
    base = summary[STUDENT]["miou"]
    lines = []
    for name, row in summary.items():
        if name == STUDENT or row["miou"] is None:
            continue
        ok = row["speedup"] >= min_speedup and base - row["miou"] <= max_lost + 1e-9
        verdict = f"{name}: {row['speedup']:.2f}x at {100 * (base - row['miou']):.2f} points lost: " + (
            "meets the target" if ok else "misses the target")
        for along, what in (("speedup", "speed-up"), ("flow_fraction", "warped fraction")):
            fixed = fixed_interval_at(summary, row[along], along=along) if is_decision(name) else None
            if fixed is not None:
                diff = 100 * (row["miou"] - fixed)
                verdict += f"; against the fixed interval at the same {what}: {diff:+.2f} points " \
                           f"({'better' if diff > 0 else 'worse'})"
        lines.append(f"- {verdict}")
    return lines


def render_markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    lines = [
        "# Region flow path (DVSNet on one device)",
        "",
        f"Machine: {m['cpu_model']}, {m['cpu_count']} CPUs, torch threads {m['torch_threads']}, OpenCV "
        f"{m['opencv']}; CPU only and shared with other jobs: speeds are ratios within this run (methods "
        "timed round-robin frame by frame). Student: " + results["student"] + "; backend " + results["backend"]
        + ". Decision network: " + results["decision_network"] + ".",
        "",
        "```",
        results["command"],
        "```",
        "",
        "Methods: `student` = the student on every whole frame; `dn@T/ageA` = 4 regions, the decision network "
        "with threshold T picks each frame's path (DVSNet's rule), a key is never warped more than A frames; "
        "`budget@B/ageA` = the same network's predicted loss (1 - score) summed since the key is kept within B, "
        "and a frame whose last loss would overrun it is segmented without computing its flow; `fixed@K` = "
        "regions segmented every K frames and warped by DIS flow in between (the fixed-interval baseline). "
        "The last two columns interpolate the fixed-interval runs to the decision network's speed-up and to its "
        "fraction of warped regions (the same number of student calls; the decision network also pays for "
        "the flow and its own call on every frame it segments).",
        "",
    ]
    for group, data in results["groups"].items():
        lines += [f"## {group}", "", data["about"], "", *group_table(data["summary"]), ""]
        if data["summary"][STUDENT]["miou"] is not None:
            lines += [*acceptance(data["summary"]), ""]
    if results.get("cluster"):
        c = results["cluster"]
        lines += ["## Edge cluster on this machine (Ray)", "", c["about"], "",
                  "| configuration | mIoU (%) | lost (points) | FPS | speed-up |", "|---|---|---|---|---|",
                  *(f"| {name} | {_pct(r['miou'])} | {r['lost_points']:.2f} | {r['fps']:.1f} | {r['speedup']:.2f}x |"
                    for name, r in c["rows"].items()), ""]
    lines += ["## The student's context: a region segmented alone", "", results["context_about"], "",
              "| segmented | agreement with the whole frame's labels (%) | mIoU vs truth (%) |", "|---|---|---|",
              *(f"| {r['context']} | {_pct(r['agreement'])} | {_pct(r['miou'])} |" for r in results["context_study"]),
              "", "## Flow method", "", results["flow_about"], ""]
    ages = [k.rsplit("_", 1)[1] for k in results["flow_study"][0] if k.startswith("agreement_age_")]
    lines += ["| method | scale | flow over | ms per frame (flow + warp) | "
              + " | ".join(f"agreement with the student at key age {a} (%)" for a in ages) + " | "
              + " | ".join(f"warped truth against the truth at key age {a} (%)" for a in ages) + " |",
              "|---|---|---|---|" + "---|" * 2 * len(ages)]
    lines += [f"| {r['method']} | {r['scale']:g} | {r['context']} | {r['ms_per_frame']:.2f} | "
              + " | ".join(_pct(r[f"agreement_age_{a}"]) for a in ages) + " | "
              + " | ".join(_pct(r[f"truth_agreement_age_{a}"]) for a in ages) + " |"
              for r in results["flow_study"]]
    lines += ["", *(f"Note: {note}" for note in results.get("notes", [])), ""]
    return "\n".join(lines)


def cluster_rows(clips: Sequence[tuple[list[np.ndarray], list[np.ndarray]]], segment: Segment,
                 student_state: dict, class_names: tuple[str, ...], config: FlowPathConfig, margin: int,
                 counts: Sequence[int], num_classes: int) -> dict[str, Any]:
    """The edge cluster with 1, 2, ... worker nodes of one CPU each, all Ray nodes on this machine.

    The cluster runs through the agent's own labeller (:class:`ClusterLabeller`, frames pipelined
    ``count + 1`` deep); each clip starts a new scene (no key carries over). The student alone runs
    first on the same frames, in the same process, as the reference; the cluster runs follow one after
    the other (each with its own fresh Ray cluster).
    """
    import ray
    from ray.cluster_utils import Cluster

    from shadowtutor.acceleration.labellers.base import label_stream
    from shadowtutor.acceleration.labellers.cluster import ClusterLabeller

    def measure(label_all: Callable[[list[np.ndarray]], list[np.ndarray]]) -> dict[str, Any]:
        seconds, scores = 0.0, []
        for frames, truth in clips:
            start = time.perf_counter()
            outputs = label_all(frames)
            seconds += time.perf_counter() - start
            scores += [miou(o, t, num_classes) for o, t in zip(outputs, truth, strict=True)]
        frames_total = sum(len(f) for f, _ in clips)
        return {"fps": frames_total / seconds, "miou": float(np.mean(scores))}

    def scene(labeller: ClusterLabeller, frames: list[np.ndarray]) -> list[np.ndarray]:
        labeller.new_scene()
        return list(label_stream(labeller, frames))

    rows = {STUDENT: measure(lambda frames: [segment(f) for f in frames])}
    for count in counts:
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
        try:
            for _ in range(count):
                cluster.add_node(num_cpus=1)
            labeller = ClusterLabeller(cluster.address, config, margin, in_flight=count + 1)
            labeller.load(student_state, class_names)
            scene(labeller, clips[0][0][:2])  # actors started and warm
            rows[f"1+{count}"] = measure(lambda frames, c=labeller: scene(c, frames))
            labeller.close()
        finally:
            ray.shutdown()
            cluster.shutdown()
    base = rows[STUDENT]
    for row in rows.values():
        row["speedup"] = row["fps"] / base["fps"]
        row["lost_points"] = 100 * (base["miou"] - row["miou"])
    return rows
