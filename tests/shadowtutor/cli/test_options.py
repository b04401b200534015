from __future__ import annotations

from shadowtutor.cli.options import script_command


def test_a_study_script_records_the_command_it_was_run_with_from_the_repository_root() -> None:
    command = script_command("/anywhere/scripts/decision_cost.py", ["--seeds", "31", "--note", "two words"])
    assert command == "python scripts/decision_cost.py --seeds 31 --note 'two words'"
