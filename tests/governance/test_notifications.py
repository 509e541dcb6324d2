"""Alert notifications delivered to a real HTTP server on loopback, started by each test: one
that answers, one that fails, one that is slow. Delivered at least once and never twice, signed,
retried with backoff, a dead letter at the end; the webhook's path (a Slack URL's secret) and
the signing secret appear in no record."""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import dagster as dg
import pytest

from aaco_pipelines.errors import AacoInputError
from aaco_pipelines.governance.alerts.lifecycle import Observation, _apply, _store
from aaco_pipelines.governance.alerts.notifications import (
    FIRST_BACKOFF,
    MAX_ATTEMPTS,
    Webhook,
    dead_letters,
    deliver_due,
)
from aaco_pipelines.resources import AlertWebhookResource, TraceLakeResource
from aaco_pipelines.sensors import alert_notifications_sensor
from aaco_pipelines.tracelake.store import TraceLake

SECRET = "s3cret-signing-key"
PATH_TOKEN = "T000/B000/XXXXtokenXXXX"  # as a Slack incoming-webhook URL's path
T0 = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)


class Endpoint:
    """A loopback HTTP server answering `status` after `delay` seconds (or as `answer` writes
    it, raw, to the socket's file); what it received."""

    def __init__(self, status: int = 200, delay: float = 0.0, answer=None):
        self.status, self.delay, self.received = status, delay, []
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                endpoint.received.append((dict(self.headers), body))
                time.sleep(endpoint.delay)
                if answer is not None:
                    try:
                        answer(self.wfile)
                    except OSError:
                        pass  # the client hung up: what a bounded client does
                    return
                self.send_response(endpoint.status)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/services/{PATH_TOKEN}"

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint():
    made = []

    def make(status=200, delay=0.0, answer=None):
        made.append(Endpoint(status, delay, answer))
        return made[-1]

    yield make
    for server in made:
        server.close()


def _lake_with_an_opened_regression(tmp_path, effect: float = 50.0) -> TraceLake:
    """A TraceLake whose tiny MLP regressed on p50 and p99 in one session: two alerts opened
    by governance.alerts.lifecycle, as a session's sync leaves them."""
    lake = TraceLake(tmp_path / "lake.duckdb")
    session = {"session_id": "s1", "model_slug": "mlp", "target": "cpu", "started_at": T0}
    found = [
        Observation(metric, "regression", True, 150.0, 100.0, effect, f"{metric} regression +50%",
                    {"verdict": "regression", "gate": {"suspected_cause": {"kind": "model_version"}}})
        for metric in ("latency_p50_ns", "latency_p99_ns")
    ]  # fmt: skip
    changed, events = _apply({}, session, found, T0)
    with lake.transaction() as con:
        _store(lake, con, "mlp", "cpu", changed, events)
    return lake


def test_one_session_s_alerts_go_out_once_signed(tmp_path, endpoint):
    server = endpoint()
    lake = _lake_with_an_opened_regression(tmp_path)
    webhook = Webhook(server.url, SECRET)
    done = deliver_due(lake, webhook, now=T0)
    assert [d.status for d in done] == ["delivered", "delivered"]
    assert deliver_due(lake, webhook, now=T0 + dt.timedelta(hours=1)) == []  # never twice
    [(headers, body)] = server.received  # the session's two alerts: one notification
    sent = json.loads(body)
    assert {a["metric"] for a in sent["alerts"]} == {"latency_p50_ns", "latency_p99_ns"}
    assert sent["event"] == "opened" and sent["model"] == "mlp" and sent["session"] == "s1"
    assert sent["alerts"][0]["suspected_cause"] == {"kind": "model_version"}
    assert sent["text"].startswith("[aaco] regression opened: mlp@cpu")  # Slack reads these
    assert sent["blocks"][0]["type"] == "header"
    expected = hmac.new(
        SECRET.encode(), headers["X-AACO-Timestamp"].encode() + b"." + body, hashlib.sha256
    ).hexdigest()
    assert headers["X-AACO-Signature"] == f"sha256={expected}"
    assert headers["X-AACO-Delivery"]


def test_a_failing_endpoint_is_retried_with_backoff_then_dead_lettered(tmp_path, endpoint):
    server = endpoint(status=500)
    lake = _lake_with_an_opened_regression(tmp_path)
    webhook = Webhook(server.url, SECRET)
    now, tried = T0, 0
    for attempt in range(1, MAX_ATTEMPTS + 1):
        done = deliver_due(lake, webhook, now=now)
        tried += 1
        assert {d.attempts for d in done} == {attempt}
        assert deliver_due(lake, webhook, now=now + dt.timedelta(seconds=1)) == []  # backing off
        now += FIRST_BACKOFF * 2**attempt
    assert {d.status for d in done} == {"dead"} and len(server.received) == tried == MAX_ATTEMPTS
    assert deliver_due(lake, webhook, now=now + dt.timedelta(days=1)) == []
    letters = dead_letters(lake)
    assert len(letters) == 2 and {r["last_error"] for r in letters} == {
        f"http://127.0.0.1:{server.server.server_port} answered HTTP 500"
    }
    _no_secret_kept(lake, tmp_path)


def test_a_slow_endpoint_costs_one_timeout_and_is_tried_again(tmp_path, endpoint):
    slow = endpoint(delay=3.0)
    lake = _lake_with_an_opened_regression(tmp_path)
    started = time.monotonic()
    done = deliver_due(lake, Webhook(slow.url, SECRET, timeout_s=0.5), now=T0)
    assert time.monotonic() - started < 2.5
    assert {d.status for d in done} == {"pending"}
    assert {d.error for d in done} == {
        f"http://127.0.0.1:{slow.server.server_port}: no whole answer within 0.5 s"
    }
    fast = endpoint()
    later = T0 + FIRST_BACKOFF
    assert {d.status for d in deliver_due(lake, Webhook(fast.url), now=later)} == {"delivered"}
    _no_secret_kept(lake, tmp_path)


def test_the_sensor_delivers_once_however_often_it_ticks(tmp_path, endpoint):
    server = endpoint()
    lake = _lake_with_an_opened_regression(tmp_path)
    resources = {
        "tracelake": TraceLakeResource(database=str(lake.path)),
        "alert_webhook": AlertWebhookResource(url=server.url, secret=SECRET),
    }
    with dg.instance_for_test() as instance:
        for _ in range(2):
            with dg.build_sensor_context(instance=instance, resources=resources) as context:
                result = alert_notifications_sensor(context)
        assert isinstance(result, dg.SkipReason) and "nothing due" in result.skip_message
        with dg.build_sensor_context(
            instance=instance,
            resources={**resources, "alert_webhook": AlertWebhookResource()},
        ) as context:
            assert "no alert webhook set" in alert_notifications_sensor(context).skip_message
    assert len(server.received) == 1


def test_a_webhook_shows_only_its_endpoint():
    webhook = Webhook(f"https://hooks.slack.com/services/{PATH_TOKEN}?token=x", SECRET)
    assert webhook.endpoint == "https://hooks.slack.com"
    assert PATH_TOKEN not in repr(webhook) and SECRET not in repr(webhook)
    with pytest.raises(AacoInputError, match="not an http"):
        Webhook("ftp://example.com/x")


def _no_secret_kept(lake: TraceLake, tmp_path) -> None:
    """Neither the URL's path nor the signing secret is in the lake or its journal."""
    with lake.connect() as con:
        rows = con.execute("SELECT * FROM alert_deliveries").fetchall()
    text = repr(rows) + (tmp_path / "lake.journal").read_text()
    assert PATH_TOKEN not in text and SECRET not in text


def _trickle(wfile) -> None:
    """A status line, then one byte every 0.2 s, for a minute: each read is answered in time."""
    for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\n" + b"x" * 300:
        wfile.write(bytes([byte]))
        wfile.flush()
        time.sleep(0.2)


def _endless(wfile) -> None:
    """A 200 whose body never ends, as fast as the socket takes it."""
    wfile.write(b"HTTP/1.1 200 OK\r\n\r\n")
    chunk = b"y" * 65536
    for _ in range(100_000):
        wfile.write(chunk)


@pytest.mark.parametrize("answer", [_trickle, _endless], ids=["trickle", "endless"])
def test_a_trickling_or_endless_answer_costs_one_deadline_and_no_memory(tmp_path, endpoint, answer):
    stranger = endpoint(answer=answer)
    lake = _lake_with_an_opened_regression(tmp_path)
    started = time.monotonic()
    done = deliver_due(lake, Webhook(stranger.url, timeout_s=1.0), now=T0)
    assert time.monotonic() - started < 3.0  # one deadline, not a read timeout per byte
    assert {d.status for d in done} == {"pending"}  # tried again later, not lost
    port = stranger.server.server_port
    expected = "no whole answer within 1 s" if answer is _trickle else "answered more than 64 KiB"
    assert {d.error for d in done} == {f"http://127.0.0.1:{port}: {expected}"}


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_a_failed_delivery_that_names_it_and_sends_nothing_on(
    tmp_path, endpoint, status
):
    elsewhere = endpoint()

    def redirect(wfile) -> None:
        wfile.write(
            f"HTTP/1.1 {status} Moved\r\nLocation: {elsewhere.url}\r\nContent-Length: 0\r\n\r\n".encode()
        )

    moved = endpoint(answer=redirect)
    lake = _lake_with_an_opened_regression(tmp_path)
    done = deliver_due(lake, Webhook(moved.url, SECRET), now=T0)
    assert {d.status for d in done} == {"pending"}  # not "delivered": the alert is not lost
    (error,) = {d.error for d in done}
    assert (
        f"answered HTTP {status}, a redirect to http://127.0.0.1:{elsewhere.server.server_port}"
        in error
    )
    assert "not followed" in error and PATH_TOKEN not in error
    assert elsewhere.received == []  # neither an empty GET nor the body and its signature


def test_a_figure_that_is_not_finite_goes_out_as_null_in_strict_json(tmp_path, endpoint):
    receiver = endpoint()
    lake = _lake_with_an_opened_regression(tmp_path, effect=float("inf"))
    assert {d.status for d in deliver_due(lake, Webhook(receiver.url), now=T0)} == {"delivered"}
    ((_, body),) = receiver.received

    def refuse(constant):
        raise AssertionError(f"{constant} in the body: not JSON")

    alerts = json.loads(body, parse_constant=refuse)["alerts"]
    assert [a["effect_pct"] for a in alerts] == [None, None]
