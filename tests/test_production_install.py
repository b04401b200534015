"""A production install imports no lab module: the product in an interpreter where the lab is not installed.

The interpreter is this one (``python -S``, no site directories) with one site directory added: a
temporary folder of symbolic links to every entry of this environment's site-packages except the lab's
(its ``*.dist-info``, its package and its editable install's ``.pth`` and finder). The product's editable
install is processed there, the lab's is not. In it:

* ``shadowtutor_lab`` cannot be found;
* every module of ``shadowtutor``, ``services`` and ``edge_agent`` imports, leaving no ``shadowtutor_lab``
  module in ``sys.modules``; the ``__main__`` modules (they run the CLI when imported) are not imported, and
  a module whose optional third-party dependency is missing is skipped only where that dependency is
  one of :data:`OPTIONAL_THIRD_PARTY`;
* ``shadowtutor --help`` lists exactly the production commands, and ``serve --help`` and ``edge --help`` work.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

PRODUCTION_COMMANDS = {"teacher", "serve", "edge", "token"}
PRODUCT_PACKAGES = ("shadowtutor", "services", "edge_agent", "shadowtutor_cli")
# Third-party packages the product may import that a development install need not have: the Jetson's
# TensorRT and its CUDA bindings.
OPTIONAL_THIRD_PARTY = frozenset({"tensorrt", "pycuda", "cuda"})
# The lab's entries of a site-packages folder: its package, its dist-info, an editable install's .pth/finder.
LAB_ENTRY = re.compile(r"^(__editable__[._]+)?shadowtutor_lab([-_.]|$)", re.IGNORECASE)

IMPORT_EVERYTHING = """
import importlib, importlib.util, json, pkgutil, sys
result = {"lab_found": importlib.util.find_spec("shadowtutor_lab") is not None, "skipped": {}, "failed": {}}
for package in %(packages)r:
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + ".", onerror=lambda name: None):
        if info.name.rsplit(".", 1)[-1] == "__main__":
            continue
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as exc:
            missing = (exc.name or "").split(".")[0]
            if missing in %(optional)r:
                result["skipped"][info.name] = missing
            else:
                result["failed"][info.name] = repr(exc)
        except Exception as exc:
            result["failed"][info.name] = repr(exc)
result["lab_modules"] = sorted(name for name in sys.modules if name.split(".")[0] == "shadowtutor_lab")
result["imported"] = sorted(name for name in sys.modules if name.split(".")[0] in %(packages)r)
print(json.dumps(result))
"""

COMMANDS = """
import json
from shadowtutor_cli import build_parser
parser = build_parser()
action = next(a for a in parser._actions if a.dest == "command")
print(json.dumps(sorted(action.choices)))
"""


def site_packages() -> list[Path]:
    """This interpreter's site-packages folders (purelib, and platlib where it differs)."""
    paths = sysconfig.get_paths()
    return sorted({Path(paths["purelib"]).resolve(), Path(paths["platlib"]).resolve()})


@pytest.fixture(scope="module")
def production_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A site directory with everything of this environment's site-packages but the lab."""
    site = tmp_path_factory.mktemp("production-site")
    for folder in site_packages():
        for entry in folder.iterdir():
            if not LAB_ENTRY.match(entry.name) and not (site / entry.name).exists():
                (site / entry.name).symlink_to(entry)
    return site


def run_production(site: Path, code: str, cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with ``argv`` in this interpreter with ``site`` as its only site directory, from ``cwd``."""
    prelude = f"import site, sys; site.addsitedir({str(site)!r}); sys.argv[1:] = {list(argv)!r}\n"
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONSTARTUP")}
    return subprocess.run([sys.executable, "-S", "-c", prelude + code], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def test_the_lab_is_left_out_of_the_production_site(production_site: Path) -> None:
    names = {entry.name for entry in production_site.iterdir()}
    assert not any(LAB_ENTRY.match(name) for name in names)
    assert any(name.lower().startswith("shadowtutor-") and name.endswith(".dist-info") for name in names)


@pytest.mark.slow
def test_every_product_module_imports_without_the_lab(production_site: Path, tmp_path: Path) -> None:
    code = IMPORT_EVERYTHING % {"packages": PRODUCT_PACKAGES, "optional": tuple(sorted(OPTIONAL_THIRD_PARTY))}
    done = run_production(production_site, code, tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert result["lab_found"] is False
    assert result["failed"] == {}
    assert result["lab_modules"] == []
    # the walk reached the product's layers (not only three empty packages)
    for module in ("shadowtutor_cli", "shadowtutor.models.student", "services.server.app", "edge_agent.agent"):
        assert module in result["imported"], module
    print("skipped (optional third-party dependency missing):", result["skipped"])


def test_the_cli_offers_exactly_the_production_commands(production_site: Path, tmp_path: Path) -> None:
    done = run_production(production_site, COMMANDS, tmp_path)
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout.splitlines()[-1])) == PRODUCTION_COMMANDS

    main = "import sys; from shadowtutor_cli import main; sys.exit(main())"
    shown = run_production(production_site, main, tmp_path, "--help")
    assert shown.returncode == 0, shown.stderr
    listed = set(re.findall(r"^    (\S+)", shown.stdout, re.MULTILINE))
    assert listed == PRODUCTION_COMMANDS, shown.stdout
    for command in ("serve", "edge"):
        helped = run_production(production_site, main, tmp_path, command, "--help")
        assert helped.returncode == 0, helped.stderr
        assert helped.stdout.startswith(f"usage: shadowtutor {command}"), helped.stdout


def test_the_development_cli_adds_the_labs_commands() -> None:
    """The other side: where the lab is installed (this environment), its commands join the product's."""
    from shadowtutor_cli import build_parser

    action = next(a for a in build_parser()._actions if a.dest == "command")
    assert PRODUCTION_COMMANDS < set(action.choices)
    assert {"bench", "scenes", "demo", "evaluate", "fuzz", "bounds", "pretrain"} <= set(action.choices)


def test_the_lab_runs_from_its_source_folder_without_being_installed(production_site: Path, tmp_path: Path) -> None:
    """A checkout where nothing of the lab is installed (a GPU machine with the repository copied over):
    ``python -m shadowtutor_lab`` with ``lab/`` on the path offers the product's and the lab's commands."""
    lab = Path(__file__).resolve().parents[1] / "lab"
    code = (f"import runpy, sys; sys.path.insert(0, {str(lab)!r}); sys.argv[0] = 'shadowtutor_lab'; "
            "runpy.run_module('shadowtutor_lab', run_name='__main__')")
    shown = run_production(production_site, code, tmp_path, "--help")
    assert shown.returncode == 0, shown.stderr
    listed = set(re.findall(r"^    (\S+)", shown.stdout, re.MULTILINE))
    assert PRODUCTION_COMMANDS < listed and {"bench", "demo", "evaluate", "scenes"} <= listed, shown.stdout
    helped = run_production(production_site, code, tmp_path, "bench", "server", "--help")
    assert helped.returncode == 0, helped.stderr
    assert "usage: shadowtutor bench server" in helped.stdout
