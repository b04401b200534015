from __future__ import annotations

import argparse

import pytest

from shadowtutor.cli.options import add_algorithm_options, algorithm_params, script_command


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
