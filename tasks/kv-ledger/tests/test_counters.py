"""Counters: default and explicit increments, validation, atomicity; concurrent serving."""
from __future__ import annotations

import socket
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit


def test_increment_defaults_to_one_and_accumulates(api, prefix):
    name = prefix + "hits"
    first = api("POST", f"/api/v1/counters/{name}/increment")
    assert first.status_code == 200
    assert first.json() == {"name": name, "value": 1}
    second = api("POST", f"/api/v1/counters/{name}/increment", json={})
    assert second.json() == {"name": name, "value": 2}


def test_increment_by_positive_zero_and_negative(api, prefix):
    name = prefix + "score"
    assert api("POST", f"/api/v1/counters/{name}/increment", json={"by": 10}).json()["value"] == 10
    assert api("POST", f"/api/v1/counters/{name}/increment", json={"by": 0}).json()["value"] == 10
    resp = api("POST", f"/api/v1/counters/{name}/increment", json={"by": -25})
    assert resp.status_code == 200
    assert resp.json() == {"name": name, "value": -15}


def test_counters_are_separate_from_keys(api, prefix, assert_error):
    name = prefix + "shared"
    api("POST", f"/api/v1/counters/{name}/increment", json={"by": 5})
    assert_error(api("GET", f"/api/v1/keys/{name}"), 404, "key_not_found")
    api("PUT", f"/api/v1/keys/{name}", json={"value": 100})
    assert api("POST", f"/api/v1/counters/{name}/increment").json()["value"] == 6


def test_increment_with_non_integer_is_400(api, prefix, assert_error):
    name = prefix + "strict"
    for by in ["1", 1.5, 2.0, True, None, [1], {"n": 1}]:
        resp = api("POST", f"/api/v1/counters/{name}/increment", json={"by": by})
        assert_error(resp, 400, "validation_error")
    # Rejected requests changed nothing.
    assert api("POST", f"/api/v1/counters/{name}/increment").json()["value"] == 1


def test_concurrent_increments_are_atomic(api, prefix):
    name = prefix + "race"
    workers, per_worker = 8, 10

    def bump(_: int) -> list[int]:
        return [api("POST", f"/api/v1/counters/{name}/increment").status_code
                for _ in range(per_worker)]

    with ThreadPoolExecutor(max_workers=workers) as pool:
        statuses = [s for chunk in pool.map(bump, range(workers)) for s in chunk]
    assert statuses == [200] * (workers * per_worker)
    final = api("POST", f"/api/v1/counters/{name}/increment", json={"by": 0})
    assert final.json()["value"] == workers * per_worker


def test_slow_client_does_not_block_other_requests(api, base_url):
    # An idle half-sent request must not stall the server: requests are served concurrently.
    url = urlsplit(base_url)
    with socket.create_connection((url.hostname, url.port or 80), timeout=5) as slow:
        slow.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")  # headers never finished
        started = time.monotonic()
        resp = api("GET", "/health", timeout=3)
        assert resp.status_code == 200
        assert time.monotonic() - started < 3
