"""Settings models as flags: the same for ``serve`` and ``edge`` (every field a flag with its variable
and default in --help, --version, boolean switches, errors naming the flag or the variable)."""

from __future__ import annotations

import argparse

import pytest
from pydantic import BaseModel, Field

from edge_agent.cli import settings_from_args as edge_settings_from_args
from edge_agent.settings import EdgeSettings, SettingsError
from services.server.settings import ServerSettings
from shadowtutor.config.settings_flags import (
    FlatSettings,
    build_settings,
    default_text,
    env_var,
    flag,
    flat_values,
    package_version,
    settings_of,
)
from shadowtutor_cli import build_parser, main


@pytest.mark.parametrize(("command", "model"), [("edge", EdgeSettings), ("serve", ServerSettings)])
def test_help_names_every_flag_its_variable_and_default(command: str, model: type,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = "".join(capsys.readouterr().out.split())  # argparse wraps lines, anywhere in long values
    for setting in settings_of(model):
        assert flag(setting.name) in text and env_var(setting.name) in text
        assert "".join(default_text(setting.field).split()) in text
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


class Inner(BaseModel):
    """A nested model as a settings model holds one: its fields become flat settings."""

    steps: int = Field(3, ge=0, description="steps")
    kind: str = Field("a", description="kind", json_schema_extra={"setting": "inner_kind"})


class Outer(FlatSettings):
    port: int = Field(1, description="port")
    inner: Inner = Field(default_factory=Inner, description="the nested model")


def test_a_nested_models_fields_are_flat_settings() -> None:
    assert [(s.name, s.path) for s in settings_of(Outer)] == [
        ("port", ("port",)), ("steps", ("inner", "steps")), ("inner_kind", ("inner", "kind"))]
    assert Outer(steps=5, inner_kind="b").inner == Inner(steps=5, kind="b")
    assert Outer(inner={"steps": 4}).inner.steps == 4  # whole, as model_dump writes it
    assert Outer(inner=Inner(steps=4), steps=6).inner == Inner(steps=6)  # the flat value wins
    assert flat_values(Outer(steps=2)) == {"port": 1, "steps": 2, "inner_kind": "a"}


def test_nested_settings_read_their_variables_and_flags_win_field_by_field(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHADOWTUTOR_STEPS", "7")
    monkeypatch.setenv("shadowtutor_inner_kind", "c")  # variables are case-insensitive, as pydantic-settings reads
    assert Outer().inner == Inner(steps=7, kind="c")
    assert Outer(steps="8").inner == Inner(steps=8, kind="c")
    assert Outer(inner={"kind": "d"}).inner == Inner(steps=7, kind="d")  # explicit values win over variables
    monkeypatch.setenv("SHADOWTUTOR_STEPS", "")  # an empty variable (compose's ${VAR:-}) is unset
    assert Outer().inner.steps == 3


def test_a_bad_nested_value_names_its_flag_or_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="^--steps: Input should be greater than or equal to 0$"):
        build_settings(Outer, {"steps": "-1"})
    monkeypatch.setenv("SHADOWTUTOR_STEPS", "x")
    with pytest.raises(ValueError, match="^SHADOWTUTOR_STEPS: Input should be a valid integer"):
        build_settings(Outer, {})


def test_a_setting_named_twice_is_refused() -> None:
    class Twice(FlatSettings):
        steps: int = 1
        inner: Inner = Field(default_factory=Inner)

    with pytest.raises(TypeError, match=r"settings named twice: \['steps'\]"):
        settings_of(Twice)
