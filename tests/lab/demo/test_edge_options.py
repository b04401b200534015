"""The demo's edge options: an acceleration reaches the ShadowTutor edge only, and two exclude each other."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from shadowtutor_cli import main
from shadowtutor_lab.demo import run
from shadowtutor_lab.demo.run import DemoConfig


class Started(Exception):
    """Raised by the stand-in for process start, once it has the command line."""


@pytest.mark.parametrize(("option", "flag"), [({"flow_path": True}, "--flow-path"),
                                              ({"change_based": True}, "--change-based")])
def test_an_acceleration_reaches_the_shadowtutor_edge_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, option: dict[str, Any], flag: str
) -> None:
    commands: list[list[str]] = []

    def start_process(args: list[str], **_kwargs: Any) -> None:  # the command line, without starting it
        commands.append(list(args))
        raise Started

    monkeypatch.setattr(run, "start_process", start_process)
    for mode in ("distill", "naive"):
        with pytest.raises(Started):
            run._run_agent(DemoConfig(out=tmp_path, **option), tmp_path, "ws://127.0.0.1:1/v1/edge", mode, tmp_path)
    distill, naive = commands
    assert flag in distill and flag not in naive


def test_change_based_and_flow_path_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--change-based", "--flow-path"])
    assert "not allowed with argument" in capsys.readouterr().err
