"""Print the requirements of an installed distribution for some extras, one per line.

Used by install-shadowtutor.sh inside the images: it leaves out what the base image already
provides under another distribution name or outside pip, which pip would install a second time.
Today that is OpenCV: the L4T images ship their own build with GStreamer (for CSI cameras), and a
PyPI opencv wheel installed over it would shadow it; and ONNX Runtime: the Jetson image installs
onnxruntime-gpu (same module), which PyPI's CPU-only onnxruntime would replace.

    python3 select_requirements.py shadowtutor --extras edge
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import re
import sys

# PyPI distributions whose module an image may already provide from a non-pip build.
PROVIDED_MODULES = {
    "opencv-python": "cv2",
    "opencv-python-headless": "cv2",
    "opencv-contrib-python": "cv2",
    "opencv-contrib-python-headless": "cv2",
    # The Jetson image installs onnxruntime-gpu (NVIDIA's build for JetPack) before ShadowTutor.
    "onnxruntime": "onnxruntime",
}
_REQUIREMENT = re.compile(r"^\s*(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?P<rest>[^;]*?)\s*(?:;\s*(?P<marker>.+))?$")
_EXTRA_MARKER = re.compile(r"""^extra\s*==\s*["'](?P<extra>[^"']+)["']$""")


class RequirementError(ValueError):
    """A requirement this script cannot select (unknown extra, unsupported marker)."""


def image_has(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def select(distribution: str, extras: set[str]) -> list[str]:
    """Requirements of ``distribution`` (core plus ``extras``) minus those the image provides."""
    try:
        metadata = importlib.metadata.metadata(distribution)
    except importlib.metadata.PackageNotFoundError as exc:
        raise RequirementError(f"{distribution} is not installed") from exc
    declared = {normalise(e) for e in metadata.get_all("Provides-Extra") or []}
    unknown = {normalise(e) for e in extras} - declared
    if unknown:
        raise RequirementError(f"{distribution} has no extra {sorted(unknown)}; it declares {sorted(declared)}")
    wanted = {normalise(e) for e in extras}
    selected = []
    for line in metadata.get_all("Requires-Dist") or []:
        match = _REQUIREMENT.match(line)
        if match is None:
            raise RequirementError(f"cannot parse requirement {line!r}")
        marker = match.group("marker")
        if marker is not None:
            extra = _EXTRA_MARKER.match(marker.strip())
            if extra is None:
                raise RequirementError(f"unsupported marker in {line!r}: only extra == '...' is handled")
            if normalise(extra.group("extra")) not in wanted:
                continue
        name = normalise(match.group("name"))
        module = PROVIDED_MODULES.get(name)
        if module is not None and image_has(module):
            print(f"select_requirements: {name} left out: the image already has {module}", file=sys.stderr)
            continue
        selected.append(f"{match.group('name')}{match.group('rest')}".strip())
    return selected


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("distribution")
    parser.add_argument("--extras", default="", help="comma-separated extras, e.g. server,onnx")
    args = parser.parse_args(argv)
    extras = {e.strip() for e in args.extras.split(",") if e.strip()}
    try:
        print("\n".join(select(args.distribution, extras)))
    except RequirementError as exc:
        print(f"select_requirements: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
