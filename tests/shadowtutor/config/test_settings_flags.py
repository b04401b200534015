"""Settings models as flags: the same for ``serve`` and ``edge`` (every field a flag with its variable
and default in --help, --version, boolean switches, errors naming the flag or the variable)."""

from __future__ import annotations

import argparse

import pytest

from edge_agent.cli import settings_from_args as edge_settings_from_args
from edge_agent.settings import EdgeSettings, SettingsError
from services.server.settings import ServerSettings
from shadowtutor.cli import build_parser, main
from shadowtutor.config.settings_flags import default_text, env_var, flag, package_version


@pytest.mark.parametrize(("command", "model"), [("edge", EdgeSettings), ("serve", ServerSettings)])
def test_help_names_every_flag_its_variable_and_default(command: str, model: type,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = "".join(capsys.readouterr().out.split())  # argparse wraps lines, anywhere in long values
    for name, field in model.model_fields.items():
        assert flag(name) in text and env_var(name) in text
        assert "".join(default_text(field).split()) in text
    assert "[envSHADOWTUTOR_METRICS_PORT;default9108]" in text or command == "serve"
    assert "[envSHADOWTUTOR_PORT;default8000]" in text or command == "edge"


@pytest.mark.parametrize("command", ["edge", "serve"])
def test_version(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main([command, "--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"shadowtutor {package_version()}"
    assert package_version() != "unknown"  # the package is installed (pip install -e)


def _edge(*flags: str) -> EdgeSettings:
    return edge_settings_from_args(build_parser().parse_args(["edge", "--server", "ws://h", "--source", "0", *flags]))


def test_boolean_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHADOWTUTOR_SAVE_LABELS", "false")
    assert _edge().save_labels is False  # the variable
    assert _edge("--save-labels").save_labels is True  # a flag alone is true and wins
    assert _edge("--save-labels", "no").save_labels is False
    monkeypatch.setenv("SHADOWTUTOR_SAVE_LABELS", "on")
    assert _edge("--no-save-labels").save_labels is False


def test_errors_name_where_the_value_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHADOWTUTOR_LINGER", "-1")
    with pytest.raises(SettingsError, match="SHADOWTUTOR_LINGER: Input should be greater than or equal to 0"):
        _edge()
    with pytest.raises(SettingsError, match="--linger: Input should be a valid number"):
        _edge("--linger", "soon")
    with pytest.raises(SystemExit):  # an unknown flag is argparse's error
        build_parser().parse_args(["edge", "--no-such-flag"])
    assert isinstance(build_parser().parse_args(["edge"]), argparse.Namespace)
