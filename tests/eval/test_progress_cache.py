"""The progress bar beside logs, and the result cache's keys and recovery."""

from __future__ import annotations

import io
import json
import logging

from rlvr_jax.eval.cache import ResultCache, model_digest, problem_key
from rlvr_jax.eval.progress import Progress


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_bar_on_a_terminal_is_cleared_before_a_log_line(monkeypatch):
    stream = _Tty()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with Progress(10, stream=stream, label="math") as bar:
            bar.skip(4)  # cached: counted, not timed
            assert "4/10 samples" in bar.line() and "eta --:--" in bar.line()
            bar.advance(2, "math/aime24")
            logging.getLogger("x").warning("a log record")
            bar.advance(2)
        assert handler.filters == []  # the filter is removed afterwards
    finally:
        root.removeHandler(handler)
    text = stream.getvalue()
    before, after = text.split("a log record")
    assert before.endswith("\r\033[K")  # the bar was wiped, the record starts a clean line
    assert after.startswith("\n\r\033[Kmath/aime24 [") and text.endswith("\n")
    assert "8/10 samples" in after


def test_bar_off_a_terminal_writes_whole_lines_at_most_every_tenth():
    stream = io.StringIO()
    with Progress(100, stream=stream) as bar:
        for _ in range(100):
            bar.advance(1)
    lines = stream.getvalue().splitlines()
    assert 10 <= len(lines) <= 11 and "\r" not in stream.getvalue()
    assert "100/100 samples" in lines[-1] and "eta 00:00" in lines[-1]


def test_cache_round_trip_skips_a_torn_last_line(tmp_path):
    path = tmp_path / "c" / "math500.jsonl"
    cache = ResultCache(path)
    assert cache.get("k1") is None and len(cache) == 0
    cache.put("k1", {"id": "p1", "responses": ["a"]})
    with open(path, "a") as f:
        f.write('{"key": "k2", "id": "p2", "respon')  # a process killed mid-write
    again = ResultCache(path)
    assert again.get("k1") == {"key": "k1", "id": "p1", "responses": ["a"]}
    assert again.get("k2") is None and len(again) == 1


def test_keys_change_with_every_input_and_digest_with_the_weights(tmp_path):
    base = ("m", "math500", "p1", {"n_samples": 4, "seed": 0}, "prompt")
    keys = {problem_key(*base)}
    keys.add(problem_key("m2", *base[1:]))
    keys.add(problem_key("m", "aime24", *base[2:]))
    keys.add(problem_key("m", "math500", "p2", *base[3:]))
    keys.add(problem_key(*base[:3], {"n_samples": 4, "seed": 1}, "prompt"))
    keys.add(problem_key(*base[:4], "prompt edited"))
    assert len(keys) == 6
    (tmp_path / "config.json").write_text(json.dumps({"a": 1}))
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 10)
    d1 = model_digest(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 9 + b"\x01")
    assert model_digest(tmp_path) != d1
