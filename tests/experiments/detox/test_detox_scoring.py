"""Toxicity scorers: the Perspective client against a fake server on 127.0.0.1 (retries, back-off,
rate limit, errors, the on-disk cache across restarts), the offline and the lexical scorers."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from tiny_tokenizer import tiny_tokenizer
from pseudosl.experiments.detox.scoring import (LexicalScorer, PerspectiveError, PerspectiveScorer,
                                                ToxicityScorer, make_scorer)


def reply(value: float) -> tuple[int, bytes, dict]:
    return 200, json.dumps({"attributeScores": {"TOXICITY": {"summaryScore": {"value": value, "type": "PROBABILITY"}},
                            "languages": ["en"]}}).encode(), {}


class FakePerspective:
    """Serves scripted replies in order; records each request (query, JSON body)."""

    def __init__(self):
        self.replies: list[tuple[int, bytes, dict]] = []
        self.requests: list[tuple[dict, dict]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.requests.append((parse_qs(urlparse(self.path).query), body))
                status, data, headers = fake.replies.pop(0) if fake.replies else (500, b"no reply scripted", {})
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                """No request log on stderr."""

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1alpha1/comments:analyze"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def fake(monkeypatch):
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    monkeypatch.setenv("PERSPECTIVE_API_KEY", "test-key")
    server = FakePerspective()
    yield server
    server.close()


def client(fake, tmp_path, **kw):
    kw = {"qps": 1000.0, "backoff": 0.5, "max_retries": 3, "timeout": 5.0, **kw}
    scorer = PerspectiveScorer(endpoint=fake.url, cache_dir=tmp_path / "cache", **kw)
    scorer.sleeps = []
    scorer._sleep = scorer.sleeps.append  # no real waiting; the waits are checked instead
    return scorer


def test_success_and_request_format(fake, tmp_path):
    fake.replies = [reply(0.25), reply(0.75)]
    scorer = client(fake, tmp_path)
    assert isinstance(scorer, ToxicityScorer) and scorer.name == "perspective"
    assert scorer.score(["hello there", "you fool", ""]) == [0.25, 0.75, 0.0]  # an empty text: no request
    assert len(fake.requests) == 2 and scorer.n_requests == 2
    query, body = fake.requests[1]
    assert query == {"key": ["test-key"]}
    assert body == {"comment": {"text": "you fool"}, "languages": ["en"], "requestedAttributes": {"TOXICITY": {}},
                    "doNotStore": True}


@pytest.mark.parametrize("status", [429, 500, 503])
def test_retry_with_backoff(fake, tmp_path, status):
    fake.replies = [(status, b"busy", {}), (status, b"busy", {}), reply(0.5)]
    scorer = client(fake, tmp_path)
    assert scorer.score(["text"]) == [0.5]
    assert len(fake.requests) == 3
    assert [s for s in scorer.sleeps if s >= 0.5] == [0.5, 1.0]  # backoff * 2**attempt


def test_retry_after_header(fake, tmp_path):
    fake.replies = [(429, b"quota", {"Retry-After": "7"}), reply(0.1)]
    scorer = client(fake, tmp_path)
    assert scorer.score(["text"]) == [0.1] and 7.0 in scorer.sleeps


def test_rate_limit(fake, tmp_path):
    fake.replies = [reply(0.1), reply(0.2), reply(0.3)]
    scorer = client(fake, tmp_path, qps=2.0)
    assert scorer.score(["a", "b", "c"]) == [0.1, 0.2, 0.3]
    assert len(scorer.sleeps) == 2 and all(0.4 < s <= 0.5 for s in scorer.sleeps)  # 1 / qps between requests


def test_errors(fake, tmp_path, monkeypatch):
    scorer = client(fake, tmp_path)
    fake.replies = [(200, b"<html>not json</html>", {})]
    with pytest.raises(PerspectiveError, match="malformed"):
        scorer.score(["a"])
    fake.replies = [(200, json.dumps({"attributeScores": {}}).encode(), {})]
    with pytest.raises(PerspectiveError, match="summaryScore"):
        scorer.score(["a"])
    fake.replies = [reply(1.5)]
    with pytest.raises(PerspectiveError, match="1.5"):
        scorer.score(["a"])
    fake.replies = [(400, b'{"error": "COMMENT_EMPTY"}', {})]
    with pytest.raises(PerspectiveError, match="HTTP 400"):  # a client error is not retried
        scorer.score(["a"])
    fake.replies = [(500, b"down", {})] * 4
    with pytest.raises(PerspectiveError, match="failed 4 times"):
        scorer.score(["a"])
    assert len(fake.requests) == 8
    monkeypatch.delenv("PERSPECTIVE_API_KEY")
    with pytest.raises(PerspectiveError, match="PERSPECTIVE_API_KEY"):
        client(fake, tmp_path).score(["b"])
    assert len(fake.requests) == 8
    with pytest.raises(TypeError, match="list of strings"):
        scorer.score("a")
    with pytest.raises(ValueError, match="qps"):
        PerspectiveScorer(qps=0)
    with pytest.raises(ValueError, match="endpoint"):
        PerspectiveScorer(endpoint="localhost:8080")


def test_cache_survives_restart_and_interruption(fake, tmp_path):
    fake.replies = [reply(0.2), (500, b"down", {}), (500, b"down", {})]
    first = client(fake, tmp_path, max_retries=1)
    with pytest.raises(PerspectiveError):  # interrupted on the second text: the first is kept
        first.score(["one", "two", "three"])
    fake.replies = [reply(0.4), reply(0.6)]
    second = client(fake, tmp_path)
    assert second.score(["one", "two", "three"]) == [0.2, 0.4, 0.6] and second.n_requests == 2
    n = len(fake.requests)
    with open(tmp_path / "cache" / "scores.jsonl", "a") as f:
        f.write('{"key": "abc", "sco')  # a line cut by a kill
    with pytest.warns(UserWarning, match="unreadable or invalid cache line"):
        third = client(fake, tmp_path)
    assert third.score(["three", "one", "two", "one"]) == [0.6, 0.2, 0.4, 0.2]
    assert third.n_requests == 0 and len(fake.requests) == n  # no request after a restart


def test_invalid_cache_entries_are_requested_again(fake, tmp_path):
    """Cached "NaN", 7, a non-UTF-8 line and a cut line are no scores: one warning, the texts asked again, and
    the next score after a cut line lands on a line of its own."""
    fake.replies = [reply(0.2), reply(0.3)]
    assert client(fake, tmp_path).score(["one", "two"]) == [0.2, 0.3]
    path = tmp_path / "cache" / "scores.jsonl"
    one, two = (json.loads(line)["key"] for line in path.read_text().splitlines())
    with open(path, "ab") as f:
        f.write(json.dumps({"key": one, "score": float("nan")}).encode() + b"\n")   # NaN: later lines would win
        f.write(json.dumps({"key": two, "score": 7}).encode() + b"\n")
        f.write(b'{"key": "\xff\xfe", "score": 0.5}\n\x80\x81 not utf-8\n')
        f.write(('{"key": "%s", "sco' % ("0" * 64)).encode())                      # cut by a kill
    with pytest.warns(UserWarning, match="skipping 5 unreadable or invalid cache line"):
        scorer = client(fake, tmp_path)
    assert scorer.score(["one", "two"]) == [0.2, 0.3] and scorer.n_requests == 0  # the valid earlier lines stand
    path.write_bytes(json.dumps({"key": one, "score": "NaN"}).encode() + b"\n"
                     + json.dumps({"key": two, "score": 7}).encode() + b"\n" + b'{"key": "ab')
    fake.replies = [reply(0.4), reply(0.5)]
    with pytest.warns(UserWarning, match="skipping 3"):
        scorer = client(fake, tmp_path)
    assert scorer.score(["one", "two"]) == [0.4, 0.5] and scorer.n_requests == 2  # asked again
    with pytest.warns(UserWarning, match="skipping 3"):  # the bad lines stay; the new scores are lines of their own
        again = client(fake, tmp_path)
    assert again.score(["one", "two"]) == [0.4, 0.5] and again.n_requests == 0


def test_cache_folder_is_checked_before_any_request(fake, tmp_path):
    from pseudosl.errors import StorageError
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    fake.replies = [reply(0.2)]
    with pytest.raises(StorageError, match=r"file/perspective/scores.jsonl cannot be written.*PSEUDOSL_CACHE"):
        PerspectiveScorer(endpoint=fake.url, cache_dir=blocker / "perspective")
    assert fake.requests == []  # no score was paid for and lost


def test_lexical_scorer():
    tok = tiny_tokenizer()
    scorer = make_scorer("lexical", tokenizer=tok, words=["darn", "brown dog"])
    assert isinstance(scorer, LexicalScorer) and scorer.name == "lexical"
    assert scorer.score(["darn it", "the brown dog", "the brown fox", "a darn", ""]) == [1.0, 1.0, 0.0, 1.0, 0.0]
    assert scorer.score_ids([tok.encode(" darn"), [0]]) == [1.0, 0.0]
    with pytest.raises(ValueError, match="unknown scorer"):
        make_scorer("toxic-bert")


def test_profanity_check_scorer():
    pytest.importorskip("profanity_check")
    scorer = make_scorer("profanity-check")
    assert scorer.name == "profanity-check"
    clean, rude = scorer.score(["have a lovely day, my friend", "shut up you fucking idiot"])
    assert 0.0 <= clean < 0.5 < rude <= 1.0
    assert scorer.score([]) == []


def test_connection_errors_are_retried(tmp_path, monkeypatch):
    import socket

    monkeypatch.setenv("no_proxy", "127.0.0.1")
    monkeypatch.setenv("PERSPECTIVE_API_KEY", "test-key")
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    scorer = PerspectiveScorer(endpoint=f"http://127.0.0.1:{port}/x", cache_dir=tmp_path, qps=1000.0,
                               max_retries=2, backoff=0.25, timeout=2.0)
    sleeps = []
    scorer._sleep = sleeps.append
    with pytest.raises(PerspectiveError, match="failed 3 times.*resume") as info:
        scorer.score(["a"])
    assert "test-key" not in str(info.value)  # the key never shows in an error
    assert [s for s in sleeps if s >= 0.25] == [0.25, 0.5]
