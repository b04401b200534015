from __future__ import annotations

import argparse

import pytest

from shadowtutor.algorithms.params import AlgorithmParams
from shadowtutor.config.settings_flags import flag
from shadowtutor_lab.cli.options import BENCH_FIXED_FIELDS, add_algorithm_options, algorithm_params, script_command


def test_a_study_script_records_the_command_it_was_run_with_from_the_repository_root() -> None:
    command = script_command("/anywhere/scripts/decision_cost.py", ["--seeds", "31", "--note", "two words"])
    assert command == "python lab/scripts/decision_cost.py --seeds 31 --note 'two words'"


@pytest.mark.parametrize(
    ("argv", "threshold", "policy"),
    [([], 0.8, "fixed"), (["--threshold", "0.7"], 0.7, "fixed"), (["--threshold", "auto"], 0.8, "auto"),
     (["--threshold", "auto", "--min-stride", "4"], 0.8, "auto")],
)
def test_threshold_flag_takes_a_number_or_auto(argv: list[str], threshold: float, policy: str) -> None:
    parser = argparse.ArgumentParser()
    add_algorithm_options(parser)
    params = algorithm_params(parser.parse_args(argv))
    assert (params.threshold, params.threshold_policy) == (threshold, policy)


def test_a_bad_threshold_flag_is_one_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench")
    add_algorithm_options(parser)
    with pytest.raises(SystemExit) as exit_info:
        parser.parse_args(["--threshold", "fast"])
    assert exit_info.value.code == 2
    assert "a number in (0, 1) or 'auto', got 'fast'" in capsys.readouterr().err


def _bench_help(capsys: pytest.CaptureFixture[str]) -> str:
    parser = argparse.ArgumentParser(prog="bench")
    add_algorithm_options(parser)
    parser.print_help()
    return "".join(capsys.readouterr().out.split())


def test_every_parameter_but_the_mode_is_a_flag_with_the_models_default(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _bench_help(capsys)
    for name, field in AlgorithmParams.model_fields.items():
        shown = flag(name) in text and f"[default{field.default}]" in text
        assert shown == (name not in BENCH_FIXED_FIELDS), name
    monkeypatch.setattr(AlgorithmParams.model_fields["max_updates"], "default", 12)
    assert "Algorithm1'sMAX_UPDATES:mosttrainingstepsperkeyframe[default12]" in _bench_help(capsys)


def test_flags_give_typed_values_and_ranges_are_the_models_to_check(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser(prog="bench")
    add_algorithm_options(parser)
    args = parser.parse_args(["--max-updates", "3", "--box-dilation", "0", "--restore", "weights+adam"])
    assert algorithm_params(args) == AlgorithmParams(max_updates=3, box_dilation=0.0, restore="weights+adam")
    with pytest.raises(ValueError, match=r"^need 1 <= min_stride <= max_stride, got 100, 64$"):
        algorithm_params(parser.parse_args(["--min-stride", "100"]))
    with pytest.raises(SystemExit):
        parser.parse_args(["--max-updates", "many"])
    assert "argument --max-updates: Input should be a valid integer" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parser.parse_args(["--weight-map", "boxes"])
    assert "argument --weight-map: Input should be 'instances' or 'regions'" in capsys.readouterr().err
