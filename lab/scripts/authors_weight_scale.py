"""Rescale the student's trainable back to the weight scale of the authors' released student, keeping
its function (docs/results/accuracy_diagnosis.md).

Adam's steps have a fixed size (about the learning rate per weight), so how far one step of Algorithm 1
moves the student depends on how large its weights are. The packaged student's back is at the scale of
its initialisation, 2-9x smaller than the authors' checkpoint (RMS per tensor), so at the paper's
learning rate each step changes it relatively more. This script moves weight scale between tensors
where the network's output cannot tell:

- ``dec2``'s output is normalised by ``dec3``'s BatchNorm (frame statistics), so it may be scaled by
  any factor; inside each block, ReLU is positively homogeneous, so a long path's three convolutions
  may share their product in any way (biases follow the scale of what they are added to);
- ``dec3``'s output, ``out_conv1`` and ``out_conv2`` are linear up to the logits, so their factors may
  be traded as long as the product (``out_conv3``'s included) is 1.

The per-tensor log factors are the least-squares fit to the authors' RMS under these constraints. The
result is refused unless its labels equal the input student's on the given frames. Not a change to
Algorithm 1 or its parameters: the same student, parametrised at another scale.

Usage: ``python lab/scripts/authors_weight_scale.py --student IN.pt --authors Student_amended.pth
--check-scenes DIR... --out OUT.pt``
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

from shadowtutor.models.checkpoint import load_student, save_student
from shadowtutor.models.student import StudentNet, normalise_frame
from shadowtutor.scene_store import Scene

FACTORS = ("dec2.a", "dec2.b", "dec2.c", "dec3.a", "dec3.b", "dec3.c", "out_conv1", "out_conv2")


def _form(factor: str | None = None) -> np.ndarray:
    """The log scale of one factor as a linear form over ``FACTORS`` (zero without one)."""
    form = np.zeros(len(FACTORS))
    if factor is not None:
        form[FACTORS.index(factor)] = 1.0
    return form


def _block_forms(block: str) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray]:
    """Weight and bias forms of one residual block; its output's form."""
    a, b, c = (_form(f"{block}.{k}") for k in "abc")
    out = a + b + c
    weights = {f"{block}.short_path.weight": out, f"{block}.long_path.0.weight": a,
               f"{block}.long_path.2.weight": b, f"{block}.long_path.3.weight": c}
    biases = {f"{block}.short_path.bias": out, f"{block}.long_path.0.bias": a,
              f"{block}.long_path.2.bias": a + b, f"{block}.long_path.3.bias": out}
    return weights, biases, out


def scale_forms() -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Every rescaled tensor's log factor as a linear form; the student's function is the same for any factors."""
    weights, biases, _ = _block_forms("dec2")  # its output only meets dec3's BatchNorm
    dec3_weights, dec3_biases, dec3_out = _block_forms("dec3")
    weights |= dec3_weights
    biases |= dec3_biases
    k1, k2 = _form("out_conv1"), _form("out_conv2")
    weights |= {"out_conv1.weight": k1, "out_conv2.weight": k2, "out_conv3.weight": -(dec3_out + k1 + k2)}
    biases |= {"out_conv1.bias": dec3_out + k1, "out_conv2.bias": dec3_out + k1 + k2,
               "out_conv3.bias": _form()}
    return weights, biases


def _rms(t: torch.Tensor) -> float:
    return float(t.float().pow(2).mean().sqrt())


def rescale(state: dict[str, torch.Tensor], target: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor],
                                                                                      dict[str, float]]:
    """``state`` with its back moved towards ``target``'s per-tensor RMS; the factors used."""
    weights, biases = scale_forms()
    names = list(weights)
    forms = np.stack([weights[n] for n in names])
    wanted = np.array([np.log(_rms(target[n]) / _rms(state[n])) for n in names])
    logs, *_ = np.linalg.lstsq(forms, wanted, rcond=None)
    out = dict(state)
    for name, form in (weights | biases).items():
        out[name] = state[name] * float(np.exp(form @ logs))
    return out, {f: float(np.exp(v)) for f, v in zip(FACTORS, logs, strict=True)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--student", type=Path, required=True)
    parser.add_argument("--authors", type=Path, required=True, help="the authors' released state dict")
    parser.add_argument("--check-scenes", type=Path, nargs="+", required=True,
                        help="scenes whose first frame must be labelled the same before and after")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    loaded = load_student(args.student)
    authors = load_student(args.authors).model.state_dict()
    state = loaded.model.state_dict()
    new_state, factors = rescale(state, authors)
    rescaled = StudentNet(loaded.model.num_classes)
    rescaled.load_state_dict(new_state)
    loaded.model.eval()
    rescaled.eval()
    with torch.no_grad():
        for scene in args.check_scenes:
            x = normalise_frame(next(Scene.open(scene).frames()))
            same = float((loaded.model(x).argmax(1) == rescaled(x).argmax(1)).float().mean())
            print(f"{scene}: labels equal on {100 * same:.4f} % of pixels")
            if same < 0.9999:
                print("the rescaled student labels differently: not saved", file=sys.stderr)
                return 1
    for name in scale_forms()[0]:
        print(f"{name:26s} RMS {_rms(state[name]):.4f} -> {_rms(new_state[name]):.4f} "
              f"(authors {_rms(authors[name]):.4f})")
    metadata = dict(loaded.metadata) | {"authors_weight_scale": {"from": str(args.student), "factors": factors}}
    save_student(args.out, rescaled, loaded.class_names, metadata)
    print(json.dumps(factors))
    return 0


if __name__ == "__main__":
    sys.exit(main())
