"""The trace builder answers every request, even when a build fails unexpectedly."""

from desktop.state import worker
from desktop.state.config import Config


def test_a_crashing_threaded_build_reports_one_sentence(qtbot, monkeypatch):
    done, errors = [], []
    builder = worker.TraceBuilder(lambda *a: done.append(a), errors.append)

    def broken(config, **_streaming):
        raise RuntimeError("boom")

    monkeypatch.setattr(worker, "build_all", broken)
    monkeypatch.setattr(worker, "THREAD_THRESHOLD_WORK", 0)  # force the worker thread
    builder.request(Config(n=32, d=4, dv=4, block_q=4, block_k=4, input="random"))
    assert builder.busy
    qtbot.waitUntil(lambda: bool(errors), timeout=5000)
    assert not builder.busy and done == []
    assert errors == [
        "Building this configuration failed (RuntimeError: boom); the previous one is kept."
    ]
