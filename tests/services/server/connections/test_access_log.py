"""The server's log never carries query strings (a token sent as ?token=... stays out of the log)."""

from __future__ import annotations

import io
import logging
import logging.config

from services.server.connections.access_log import DropQueryStrings, logging_config, without_query


def test_query_strings_are_replaced_and_paths_kept() -> None:
    assert without_query("/v1/sessions?token=s3cret") == "/v1/sessions?…"
    assert without_query("/healthz") == "/healthz"


def test_uvicorn_s_access_records_lose_their_query_through_the_configured_handler(monkeypatch) -> None:
    """uvicorn's own logging configuration with the filter, and records as uvicorn's h11 protocol logs them."""
    out = io.StringIO()
    monkeypatch.setattr("sys.stdout", out)  # the access handler writes to stdout, the default one to stderr
    monkeypatch.setattr("sys.stderr", out)
    logging.config.dictConfig(logging_config())
    try:
        access = logging.getLogger("uvicorn.access")
        access.info('%s - "%s %s HTTP/%s" %d', "127.0.0.1:5000", "GET", "/v1/sessions?token=s3cret", "1.1", 401)
        logging.getLogger("uvicorn.error").info('%s - "WebSocket %s" [accepted]', "127.0.0.1:5001",
                                                "/v1/edge?token=s3cret")
    finally:
        logging.config.dictConfig({"version": 1, "disable_existing_loggers": False})
    text = out.getvalue()
    assert "s3cret" not in text and "/v1/sessions?…" in text and "/v1/edge?…" in text


def test_other_arguments_pass_untouched() -> None:
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 1, "%s %s %d", ("a?b", "/p?q", 1), None)
    assert DropQueryStrings().filter(record) and record.args == ("a?b", "/p?…", 1)
