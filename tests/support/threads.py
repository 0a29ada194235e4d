"""Running a call on a thread with a deadline, so that a test of failure handling fails
with "a hang" instead of hanging the suite."""

from __future__ import annotations

import threading


def within(seconds: float, fn):
    """``fn()``'s result or error, failing the test if it has not returned in time."""
    outcome = {}

    def call():
        try:
            outcome["result"] = fn()
        except BaseException as error:  # noqa: BLE001 - handed back to the test
            outcome["error"] = error

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s: a hang"
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("result")
