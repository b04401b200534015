"""Judging one case: its outcome (for the counts) and its violations of docs/protocol.md.

Rules for every case: an end within the timeout (else a hang); no ``internal`` error and no
close 1011; only documented error and close codes; a fatal ERROR before each close, and the
close code that ERROR's code names (exceptions: 1009 from the WebSocket layer, 1000 after the
edge's own fatal ERROR, 1012 at shutdown; what the case's :class:`Expect` allows besides).
Then the rest of the case's :class:`Expect`.
"""

from __future__ import annotations

from shadowtutor.protocol.errors import CloseCode, ErrorCode
from shadowtutor_lab.stress.fuzz_cases import CLOSE, CONTINUE, DROP, FuzzCase
from shadowtutor_lab.stress.fuzz_client import ANSWERED, CLOSED, CONNECT_FAILED, DROPPED, TIMEOUT, Observation

ERROR_CODES = frozenset(code.value for code in ErrorCode)
CLOSE_WITHOUT_ERROR = frozenset({CloseCode.NORMAL, CloseCode.MESSAGE_TOO_BIG, 1012})
DOCUMENTED_CLOSE_CODES = frozenset({code.close for code in ErrorCode}) | CLOSE_WITHOUT_ERROR


def outcome(seen: Observation) -> str:
    """A short key for counting: ``close 1002 bad_message``, ``answered (bad_frame)``, ``dropped``..."""
    codes = sorted({code for code, _ in seen.errors})
    if seen.ended == CLOSED:
        fatal = [code for code, is_fatal in seen.errors if is_fatal]
        return f"close {seen.close_code}" + (f" {fatal[0]}" if fatal else "")
    if seen.ended == ANSWERED:
        return "answered" + (f" ({', '.join(codes)})" if codes else "")
    return seen.ended


def violations(case: FuzzCase, seen: Observation, timeout: float) -> list[str]:
    """What the server did wrong in ``case``; empty when it behaved as documented."""
    expect = case.expect
    found: list[str] = []
    if seen.ended == CONNECT_FAILED:
        return [f"could not connect: {seen.detail}"]
    if seen.ended == TIMEOUT and expect.end != DROP:
        found.append(f"hang: neither an answer nor a close within {timeout:g} s (received {seen.received})")
    if seen.undecodable:
        found.append(f"{seen.undecodable} server message(s) were not valid protocol messages")
    codes = [code for code, _ in seen.errors]
    unknown = sorted(set(codes) - ERROR_CODES)
    if unknown:
        found.append(f"undocumented error code(s) {unknown}")
    if ErrorCode.INTERNAL.value in codes or seen.close_code == CloseCode.INTERNAL_ERROR:
        found.append(f"internal error: {outcome(seen)} {seen.close_reason!r}")
    if seen.ended == CLOSED:
        found.extend(_close_rules(seen, expect.close_codes or frozenset()))
    if expect.end == DROP or seen.ended == DROPPED:
        return found
    if expect.codes is not None and set(codes) - expect.codes:
        found.append(f"unexpected error code(s) {sorted(set(codes) - expect.codes)}, expected {sorted(expect.codes)}")
    if expect.require is not None and expect.require not in codes:
        found.append(f"expected ERROR {expect.require}, got {outcome(seen)}")
    if expect.end == CLOSE and seen.ended == ANSWERED:
        found.append("expected the server to end the session; it went on")
    if expect.end == CLOSE and seen.ended == CLOSED and expect.close_codes is not None \
            and seen.close_code not in expect.close_codes:
        found.append(f"expected close code {sorted(expect.close_codes)}, got {seen.close_code}")
    if expect.end == CONTINUE and seen.ended == CLOSED:
        found.append(f"expected the session to go on; it was closed ({outcome(seen)} {seen.close_reason!r})")
    if expect.end == CONTINUE and seen.ended == ANSWERED and seen.answers < expect.answers:
        found.append(f"expected {expect.answers} UPDATE/LABELS answer(s), got {seen.answers}")
    return found


def _close_rules(seen: Observation, expected: frozenset[int]) -> list[str]:
    code = seen.close_code
    if code not in DOCUMENTED_CLOSE_CODES and code not in expected:
        what = "no close frame (connection cut)" if code == 1006 else f"close code {code}"
        return [f"undocumented close: {what} after {seen.received}"]
    fatal = [error for error, is_fatal in seen.errors if is_fatal]
    if not fatal:
        return [] if code in CLOSE_WITHOUT_ERROR | expected else [f"close {code} without a fatal ERROR first"]
    if fatal[0] in ERROR_CODES and (documented := ErrorCode(fatal[0]).close) != code:
        return [f"close {code} after fatal ERROR {fatal[0]}, which the protocol closes with {documented}"]
    return []
