"""OAuth link secrets never reach a log line or a session recording."""

from __future__ import annotations

import logging

from panager.agent.graph.events import Event
from panager.agent.graph.recorders import JsonEventLog, SessionRecorder
from panager.services.sessions import SessionStore

STATE = "m7YfQG05_vKDDhGN1c72re1vfhvwBn_f.Pca0vrG2pSm1HKQkVZtKsLjbSvpOdrC_oTFNiq307TU"
LINK_TEXT = f"Connect it here: https://p.example/oauth/google/start?state={STATE}\nThanks"


def link_reply() -> Event:
    return Event("message_end", 7, {"text": LINK_TEXT, "id": "m1", "iteration": 1})


def test_debug_json_log_redacts_link_state(caplog):
    caplog.set_level(logging.DEBUG, logger="panager.events")
    JsonEventLog()(link_reply())
    assert "oauth/google/start?state=[redacted]" in caplog.text
    assert STATE not in caplog.text and STATE[:20] not in caplog.text


def test_session_recording_redacts_link_state(tmp_path):
    store = SessionStore(tmp_path)
    SessionRecorder(store)(link_reply())
    text = store.recording_path(7).read_text()
    assert "state=[redacted]" in text and STATE not in text
