"""``shadowtutor --help`` with the lab installed: every lab command listed, and building the parser imports
neither torch nor the lab's benchmark code (the commands import those in their handlers)."""

from __future__ import annotations

import json
import subprocess
import sys

LAB_COMMANDS = {"bench", "bounds", "change-based", "demo", "evaluate", "fuzz", "pretrain", "regions", "scenes"}

PROBE = """
import json, sys
from shadowtutor_cli import build_parser
action = next(a for a in build_parser()._actions if a.dest == "command")
heavy = sorted(n for n in sys.modules if n.split(".")[0] in ("torch", "cv2", "skimage", "matplotlib"))
print(json.dumps({"commands": sorted(action.choices), "heavy": heavy}))
"""


def test_the_parser_lists_the_lab_commands_without_heavy_imports() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    assert LAB_COMMANDS <= set(result["commands"])
    assert result["heavy"] == []
