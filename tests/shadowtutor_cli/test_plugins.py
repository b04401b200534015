"""The console script's plugin commands: every module of the entry-point group ``shadowtutor.commands``
registers after the product's commands, in the order of the entry points' names, each once."""

from __future__ import annotations

import argparse
import sys
import types
from importlib.metadata import EntryPoint

import pytest

import shadowtutor_cli as cli


def fake_entry_points(*pairs: tuple[str, str]):
    def entry_points(group: str) -> list[EntryPoint]:
        assert group == cli.PLUGIN_GROUP
        return [EntryPoint(name=name, value=value, group=group) for name, value in pairs]
    return entry_points


def command_module(command: str) -> types.ModuleType:
    module = types.ModuleType(f"fake_{command}")

    def register(subparsers: argparse._SubParsersAction) -> None:
        subparsers.add_parser(command, help=f"the {command} command").set_defaults(handler=lambda args: 7)

    module.register = register  # type: ignore[attr-defined]
    return module


def test_plugins_come_sorted_by_entry_point_name_each_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "entry_points", fake_entry_points(
        ("zeta", "lab.z"), ("alpha", "lab.a"), ("beta", "lab.b"), ("alpha", "lab.a")))
    assert cli.plugin_modules() == ["lab.a", "lab.b", "lab.z"]


def test_no_plugins_no_extra_commands(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli, "entry_points", fake_entry_points())
    action = next(a for a in cli.build_parser()._actions if a.dest == "command")
    assert list(action.choices) == ["teacher", "serve", "edge", "token"]


def test_a_plugin_command_registers_after_the_products_and_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "fake_hello", command_module("hello"))
    monkeypatch.setitem(sys.modules, "fake_abc", command_module("abc"))
    monkeypatch.setattr(cli, "entry_points", fake_entry_points(("hello", "fake_hello"), ("abc", "fake_abc")))
    action = next(a for a in cli.build_parser()._actions if a.dest == "command")
    assert list(action.choices) == ["teacher", "serve", "edge", "token", "abc", "hello"]
    assert cli.main(["hello"]) == 7
