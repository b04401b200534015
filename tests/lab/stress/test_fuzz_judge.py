from __future__ import annotations

import pytest

from shadowtutor_lab.stress.fuzz_cases import ANY, CLOSE, CONTINUE, DROP, Expect, FuzzCase, Send
from shadowtutor_lab.stress.fuzz_client import ANSWERED, CLOSED, CONNECT_FAILED, DROPPED, TIMEOUT, Observation
from shadowtutor_lab.stress.fuzz_judge import outcome, violations


def case(expect: Expect) -> FuzzCase:
    return FuzzCase(0, "test", "variant", None, (Send(b"x"),), expect)


def closed(code: int, *errors: tuple[str, bool]) -> Observation:
    return Observation(ended=CLOSED, close_code=code, errors=list(errors))


BAD = Expect(CLOSE, frozenset({"bad_message"}), require="bad_message")


@pytest.mark.parametrize(("expect", "seen"), [
    (BAD, closed(1002, ("bad_message", True))),
    (Expect(CONTINUE, frozenset({"bad_frame"}), require="bad_frame", answers=1),
     Observation(ended=ANSWERED, errors=[("bad_frame", False)], answers=1)),
    (Expect(CLOSE, frozenset({"too_large"}), close_codes=frozenset({1009, 1006})), closed(1009)),
    (Expect(CLOSE, frozenset({"too_large"}), close_codes=frozenset({1009, 1006})), closed(1006)),
    (Expect(CLOSE, frozenset(), close_codes=frozenset({1000})), closed(1000)),
    (Expect(ANY), closed(1008, ("incompatible_model", True))),
    (Expect(ANY), Observation(ended=ANSWERED)),
    (Expect(DROP), Observation(ended=DROPPED)),
])
def test_documented_behaviour_is_no_violation(expect: Expect, seen: Observation) -> None:
    assert violations(case(expect), seen, 10) == []


@pytest.mark.parametrize(("expect", "seen", "what"), [
    (Expect(ANY), Observation(ended=TIMEOUT), "hang"),
    (Expect(ANY), closed(1011, ("internal", True)), "internal error"),
    (Expect(ANY), closed(1002, ("made_up", True)), "undocumented error code"),
    (Expect(ANY), closed(1006), "no close frame"),
    (Expect(ANY), closed(4000, ("bad_message", True)), "close code 4000"),
    (Expect(ANY), closed(1003, ("bad_message", True)), "which the protocol closes with 1002"),
    (Expect(ANY), closed(1002), "without a fatal ERROR first"),
    (Expect(ANY), Observation(ended=ANSWERED, undecodable=1), "not valid protocol messages"),
    (Expect(ANY), Observation(ended=CONNECT_FAILED, detail="refused"), "could not connect"),
    (BAD, Observation(ended=ANSWERED), "it went on"),
    (BAD, closed(1002, ("unexpected_message", True)), "unexpected error code"),
    (Expect(CLOSE, close_codes=frozenset({1000})), closed(1008, ("rate_limited", True)), "expected close code"),
    (Expect(CONTINUE, frozenset()), closed(1002, ("bad_message", True)), "expected the session to go on"),
    (Expect(CONTINUE, frozenset(), answers=2), Observation(ended=ANSWERED, answers=1), "2 UPDATE/LABELS"),
    (Expect(CONTINUE, frozenset({"bad_frame"}), require="bad_frame"), Observation(ended=ANSWERED),
     "expected ERROR bad_frame"),
])
def test_violations(expect: Expect, seen: Observation, what: str) -> None:
    found = violations(case(expect), seen, 10)
    assert any(what in v for v in found), found


def test_a_dropped_case_is_judged_only_on_what_the_server_did() -> None:
    assert violations(case(Expect(DROP)), Observation(ended=TIMEOUT), 10) == []
    assert violations(case(Expect(DROP)), closed(1011, ("internal", True)), 10) != []


def test_outcome_keys() -> None:
    assert outcome(closed(1002, ("bad_message", True))) == "close 1002 bad_message"
    assert outcome(closed(1009)) == "close 1009"
    assert outcome(Observation(ended=ANSWERED, errors=[("bad_frame", False)])) == "answered (bad_frame)"
    assert outcome(Observation(ended=DROPPED)) == "dropped"
