"""The edge agent runs on its image's packages only: the core dependencies and the ``edge`` extra
(plus ``onnx`` for the ONNX Runtime backends). Checked in a fresh interpreter, both ways:

* with the scene-making, plotting, benchmark and server packages blocked (an import of one fails
  as if it were not installed), ``shadowtutor edge --help`` works, the agent's modules import and
  the packaged student labels a frame through the CPU backends;
* every third-party module that run loaded belongs to a distribution those requirements bring in.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from importlib.metadata import distribution, packages_distributions
from pathlib import Path

import pytest
from packaging.requirements import Requirement

tomllib = pytest.importorskip("tomllib", reason="reads pyproject.toml with Python 3.11's tomllib")

REPO_ROOT = Path(__file__).resolve().parents[2]
EDGE_EXTRAS = {"edge", "onnx"}
# Not in the edge image: what makes scenes and plots, the benchmarks' progress bars, the server (pynvml: its GPU
# metrics; torch.cuda imports it whenever it is installed, and goes on without it), the lab.
BLOCKED = ("skimage", "scipy", "matplotlib", "networkx", "tqdm", "torchvision", "fastapi", "uvicorn", "starlette",
           "PIL", "imageio", "pynvml", "shadowtutor_lab")

SCRIPT = textwrap.dedent("""
    import contextlib, importlib.abc, io, json, sys

    BLOCKED = set(sys.argv[1].split(","))

    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {name!r} (blocked: not in the edge image)", name=name)
            return None

    sys.meta_path.insert(0, Blocker())
    import shadowtutor_cli
    from shadowtutor_cli import main

    shadowtutor_cli.plugin_modules = lambda: []  # the image has no lab, so no plugin commands

    with contextlib.redirect_stdout(io.StringIO()) as help_text:
        try:
            main(["edge", "--help"])
        except SystemExit as stop:
            assert stop.code == 0, stop.code
    assert "SHADOWTUTOR_SERVER" in help_text.getvalue()

    import numpy as np
    import edge_agent.agent, edge_agent.cli, edge_agent.metrics, edge_agent.sinks, edge_agent.sources  # noqa
    from edge_agent.runtime import StudentRuntime
    from shadowtutor.models.pretrained import load_default_student

    loaded = load_default_student()
    frame = np.random.default_rng(0).integers(0, 256, (72, 96, 3), dtype=np.uint8)
    for backend in ("auto", "torch", "onnx", "reference"):
        runtime = StudentRuntime(backend)
        runtime.load(loaded.model.state_dict(), loaded.class_names)
        assert runtime.infer(frame).shape == (72, 96)
    print(json.dumps(sorted({m.split(".")[0] for m in sys.modules})))
""")


def requirement_closure(extras: set[str]) -> set[str]:
    """Normalised names of the distributions that ShadowTutor's core and ``extras`` bring in, recursively.

    ShadowTutor's own requirements come from pyproject.toml (this checkout), the others' from
    their installed metadata.
    """
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(line) for line in project["dependencies"]]
    wanted += [Requirement(line) for extra in extras for line in project["optional-dependencies"][extra]]
    seen: set[str] = set()
    while wanted:
        requirement = wanted.pop()
        key = _normalise(requirement.name)
        if key in seen:
            continue
        seen.add(key)
        environments = [{"extra": e} for e in requirement.extras] or [{"extra": ""}]
        for line in distribution(requirement.name).requires or []:
            nested = Requirement(line)
            if nested.marker is None or any(nested.marker.evaluate(env) for env in environments):
                wanted.append(nested)
    return seen


def _normalise(name: str) -> str:
    return name.lower().replace("_", "-").replace(".", "-")


def test_edge_agent_needs_only_the_edge_images_packages() -> None:
    result = subprocess.run([sys.executable, "-c", SCRIPT, ",".join(BLOCKED)], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=240, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert not set(BLOCKED) & set(loaded)
    allowed = requirement_closure(EDGE_EXTRAS) | {"shadowtutor"}
    assert not {"scikit-image", "matplotlib", "scipy", "torchvision", "fastapi"} & allowed  # (torch needs networkx)
    owners = packages_distributions()
    outside = {module: owners[module] for module in loaded
               if module in owners and not any(_normalise(d) in allowed for d in owners[module])}
    assert not outside, f"the agent imported modules of distributions outside core+{sorted(EDGE_EXTRAS)}: {outside}"
