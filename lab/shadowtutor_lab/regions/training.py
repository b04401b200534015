"""Training data and training of the decision network, on generated scenes (seeds >= 3000).

A sample is one region at frame ``t`` with its key ``a`` frames earlier: the features the
flow path computes (:func:`~shadowtutor.acceleration.regions.decision.region_features`) and
a target, the region's confidence score (both paths from whole-frame segmentations, the
labeller's default):

* ``student`` (DVSNet's): the fraction of pixels on which the key's labels warped to ``t``
  agree with the student's labels of ``t``. This student flickers, so the target is noisy
  and rewards agreeing with its mistakes (docs/results/regions/decision_study.md);
* ``truth``: the flow path's pixel accuracy against the scene's truth relative to the
  segmentation path's, ``min(1, 1 + acc(warped) - acc(student))``: 1 where warping loses
  nothing, 0.95 where it mislabels 5 % more pixels than segmenting would.

Besides the presets' scenes, a spliced clip (shots of 12-40 frames from the presets in turn,
a hard cut at each) can show the network what a cut looks like. Scenes with seeds below 3000
stay out, so that benchmarks can judge the network on scenes it never saw.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from shadowtutor.acceleration.regions.decision import FEATURE_COUNT, DecisionNetwork
from shadowtutor.acceleration.regions.flow import FlowEstimator
from shadowtutor.acceleration.regions.grid import RegionGrid, crop
from shadowtutor.acceleration.regions.labeller import KeyFlows, RegionKey
from shadowtutor_lab.regions.bench import spliced
from shadowtutor_lab.regions.configs import DecisionTrainingConfig

TARGET_ABOUT = {
    "student": "the fraction of the region's pixels where the key's labels warped to t agree with the student's "
               "labels of t (DVSNet's).",
    "truth": "the flow path's pixel accuracy against the truth relative to the segmentation path's: "
             "min(1, 1 + acc(key's labels warped to t) - acc(student's labels of t)).",
}
SPLICED = "spliced"


@dataclass
class Samples:
    features: list[np.ndarray] = field(default_factory=list)
    targets: list[float] = field(default_factory=list)
    groups: list[str] = field(default_factory=list)  # the preset each sample came from

    def add(self, features: np.ndarray, target: float, group: str) -> None:
        self.features.append(features)
        self.targets.append(target)
        self.groups.append(group)


def scene_samples(frames: Sequence[np.ndarray], truth: Sequence[np.ndarray],
                  segment: Callable[[np.ndarray], np.ndarray], config: DecisionTrainingConfig, flow: FlowEstimator,
                  group: str, samples: Samples) -> None:
    """Add every (frame, key age, region) sample of one scene (frames and their truth) to ``samples``."""
    labels = [segment(frame) for frame in frames]
    greys = [flow.small_grey(frame) for frame in frames]
    height, width = labels[0].shape
    whole = (0, 0, width, height)
    boxes = RegionGrid(width=width, height=height, regions=config.regions).boxes
    for t in range(max(config.ages), len(frames)):
        for age in config.ages:
            k = t - age
            flows = KeyFlows(flow, greys[t])  # the labeller's default: one flow for the whole frame
            for box in boxes:
                key = RegionKey.cut(flow, greys[k], labels[k], whole, box, k, 0)
                warped = flows.warped_labels(key)
                now = crop(labels[t], box)
                if config.target == "student":
                    target = float((warped == now).mean())
                else:
                    true = crop(truth[t], box)
                    target = min(1.0, 1.0 + float((warped == true).mean()) - float((now == true).mean()))
                samples.add(flows.features(key, age, config.max_key_age), target, group)


def fit(features: torch.Tensor, targets: torch.Tensor, config: DecisionTrainingConfig) -> DecisionNetwork:
    """Full-batch Adam on the squared error; deterministic for a given torch version and thread count."""
    torch.manual_seed(config.seed)
    net = DecisionNetwork()
    net.set_standardisation(features)
    optimiser = torch.optim.AdamW(net.layers.parameters(), lr=config.learning_rate,
                                  weight_decay=config.weight_decay)
    for _ in range(config.epochs):
        optimiser.zero_grad()
        loss = torch.mean((net(features) - targets) ** 2)
        loss.backward()
        optimiser.step()
    return net.eval()


def _errors(net: DecisionNetwork, features: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    with torch.no_grad():
        predicted = net(features)
    error = (predicted - targets).abs()
    corr = float(torch.corrcoef(torch.stack([predicted, targets]))[0, 1]) if len(targets) > 1 else float("nan")
    return {"samples": len(targets), "mae": float(error.mean()), "rmse": float(torch.sqrt((error**2).mean())),
            "correlation": corr, "target_mean": float(targets.mean())}


def train_decision_network(
    scene: Callable[[str, int], tuple[Sequence[np.ndarray], Sequence[np.ndarray]]],
    segment: Callable[[np.ndarray], np.ndarray],
    config: DecisionTrainingConfig,
    log: Callable[[str], None] = print,
) -> tuple[DecisionNetwork, dict[str, Any]]:
    """Train on ``scene(preset, seed) -> (frames, truth)``; returns the network (fit on all scenes) and a report.

    The report holds the data summary and the error of a network fit without the validation
    preset's scenes, measured on them (how well it predicts on a kind of scene it did not see).
    """
    started = time.monotonic()
    flow = FlowEstimator()
    samples = Samples()
    for preset in config.presets:
        for seed in config.seeds:
            scene_samples(*scene(preset, seed), segment, config, flow, preset, samples)
            log(f"{preset} seed {seed}: {len(samples.targets)} samples so far")
    if config.spliced:  # the validation preset stays out of it too
        sources = [p for p in config.presets if p != config.validation_preset]
        for seed in config.seeds:
            scenes = [scene(p, seed) for p in sources]
            frames = list(spliced([frames for frames, _ in scenes], config.frames, seed))
            truth = list(spliced([truth for _, truth in scenes], config.frames, seed))
            scene_samples(frames, truth, segment, config, flow, SPLICED, samples)
            log(f"{SPLICED} seed {seed}: {len(samples.targets)} samples so far")
    features = torch.from_numpy(np.stack(samples.features)).reshape(-1, FEATURE_COUNT)
    targets = torch.tensor(samples.targets, dtype=torch.float32)
    held_out = torch.tensor([g == config.validation_preset for g in samples.groups])
    probe = fit(features[~held_out], targets[~held_out], config)
    net = fit(features, targets, config)
    per_preset = {
        preset: {"samples": int(sum(g == preset for g in samples.groups)),
                 "target_mean": float(targets[torch.tensor([g == preset for g in samples.groups])].mean())}
        for preset in (*config.presets, *((SPLICED,) if config.spliced else ()))
    }
    report = {
        "config": {**asdict(config), "flow": flow.method, "flow_scale": flow.scale},
        "samples": len(samples.targets),
        "per_preset": per_preset,
        "target_quantiles": {str(q): float(torch.quantile(targets, q)) for q in (0.05, 0.25, 0.5, 0.75, 0.95)},
        "validation": {"preset": config.validation_preset,
                       "held_out": _errors(probe, features[held_out], targets[held_out]),
                       "trained_on": _errors(probe, features[~held_out], targets[~held_out])},
        "final_fit": _errors(net, features, targets),
        "seconds": time.monotonic() - started,
    }
    return net, report


def render_training_report(report: dict[str, Any]) -> str:
    """The training report as Markdown."""
    c = report["config"]
    v = report["validation"]
    lines = [
        "# Decision network: training data and result",
        "",
        f"Machine: {report['machine']['cpu_model']}, {report['machine']['cpu_count']} CPUs; "
        f"torch {report['machine']['torch']}, OpenCV {report['machine']['opencv']}.",
        "",
        "```",
        report["command"],
        "```",
        "",
        f"Scenes: presets {', '.join(c['presets'])}; seeds {c['seeds']}; {c['frames']} frames each at "
        f"{c['size'][0]}x{c['size'][1]}. Regions: {c['regions']}; key ages {c['ages']} (max {c['max_key_age']}). "
        f"Flow: {c['flow']} at scale {c['flow_scale']}. Segmentation: {report['student']}.",
        "",
        "A sample is one region at frame t with its key t-a frames before: the flow-path features and the "
        "target, " + TARGET_ABOUT[c.get("target", "student")] + (
            f" Spliced: a clip of shots of 12-40 frames taken in turn from the presets other than "
            f"{c['validation_preset']}, a hard cut at each." if c.get("spliced") else ""),
        "",
        f"Samples: {report['samples']}. Target quantiles (5/25/50/75/95 %): "
        + ", ".join(f"{v_:.3f}" for v_ in report["target_quantiles"].values()) + ".",
        "",
        "| preset | samples | mean target |",
        "|---|---|---|",
        *(f"| {p} | {d['samples']} | {d['target_mean']:.3f} |" for p, d in report["per_preset"].items()),
        "",
        f"Validation: a network fit without the `{v['preset']}` scenes, measured on them and on its own "
        "training samples; then the packaged network is fit on all samples.",
        "",
        "| fit | measured on | samples | MAE | RMSE | correlation | mean target |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = (("without " + v["preset"], v["preset"] + " (unseen)", v["held_out"]),
            ("without " + v["preset"], "its training samples", v["trained_on"]),
            ("all (packaged)", "all samples", report["final_fit"]))
    for fit_name, on, e in rows:
        lines.append(f"| {fit_name} | {on} | {e['samples']} | {e['mae']:.4f} | {e['rmse']:.4f} | "
                     f"{e['correlation']:.3f} | {e['target_mean']:.3f} |")
    lines += ["", f"Took {report['seconds']:.0f} s.", ""]
    return "\n".join(lines)
