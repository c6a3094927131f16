"""Key lifecycle: create, update, read, delete and compare-and-set."""
from __future__ import annotations


def test_health(api):
    resp = api("GET", "/health")
    assert resp.status_code == 200
    assert resp.json() == {"status": "ok"}


def test_put_creates_key_with_version_1(api, prefix):
    key = prefix + "new"
    resp = api("PUT", f"/api/v1/keys/{key}", json={"value": {"name": "Ada", "tags": [1, 2]}})
    assert resp.status_code == 201
    assert resp.headers.get("Content-Type", "").startswith("application/json")
    assert resp.json() == {"key": key, "value": {"name": "Ada", "tags": [1, 2]}, "version": 1}


def test_put_existing_key_updates_and_increments_version(api, prefix):
    key = prefix + "upd"
    assert api("PUT", f"/api/v1/keys/{key}", json={"value": "a"}).status_code == 201
    second = api("PUT", f"/api/v1/keys/{key}", json={"value": "b"})
    assert second.status_code == 200
    assert second.json() == {"key": key, "value": "b", "version": 2}
    # Writing the same value again is still a new version.
    third = api("PUT", f"/api/v1/keys/{key}", json={"value": "b"})
    assert third.status_code == 200
    assert third.json()["version"] == 3


def test_get_returns_latest_version(api, prefix):
    key = prefix + "latest"
    for value in (1, 2, 3):
        api("PUT", f"/api/v1/keys/{key}", json={"value": value})
    resp = api("GET", f"/api/v1/keys/{key}")
    assert resp.status_code == 200
    assert resp.json() == {"key": key, "value": 3, "version": 3}


def test_values_of_every_json_type_round_trip(api, prefix):
    values = [{"a": {"b": [1, None]}}, [1, "two", 3.5], "text", 42, -7.25, True, False, None]
    for i, value in enumerate(values):
        key = f"{prefix}v{i}"
        put = api("PUT", f"/api/v1/keys/{key}", json={"value": value})
        assert put.status_code == 201, (value, put.text)
        got = api("GET", f"/api/v1/keys/{key}")
        assert got.status_code == 200
        assert got.json() == {"key": key, "value": value, "version": 1}


def test_key_with_all_allowed_characters_and_max_length(api, prefix):
    key = (prefix + "Az09_.-" + "x" * 64)[:64]
    assert len(key) == 64
    resp = api("PUT", f"/api/v1/keys/{key}", json={"value": "ok"})
    assert resp.status_code == 201
    assert api("GET", f"/api/v1/keys/{key}").json()["key"] == key


def test_get_missing_key_is_404(api, prefix, assert_error):
    assert_error(api("GET", f"/api/v1/keys/{prefix}missing"), 404, "key_not_found")


def test_delete_returns_204_then_key_is_gone(api, prefix, assert_error):
    key = prefix + "del"
    api("PUT", f"/api/v1/keys/{key}", json={"value": 1})
    resp = api("DELETE", f"/api/v1/keys/{key}")
    assert resp.status_code == 204
    assert resp.content == b""
    assert_error(api("GET", f"/api/v1/keys/{key}"), 404, "key_not_found")
    assert_error(api("GET", f"/api/v1/keys/{key}/history"), 404, "key_not_found")
    assert_error(api("DELETE", f"/api/v1/keys/{key}"), 404, "key_not_found")


def test_delete_missing_key_is_404(api, prefix, assert_error):
    assert_error(api("DELETE", f"/api/v1/keys/{prefix}never"), 404, "key_not_found")


def test_recreate_after_delete_starts_again_at_version_1(api, prefix):
    key = prefix + "again"
    api("PUT", f"/api/v1/keys/{key}", json={"value": "old"})
    api("PUT", f"/api/v1/keys/{key}", json={"value": "older"})
    assert api("DELETE", f"/api/v1/keys/{key}").status_code == 204
    resp = api("PUT", f"/api/v1/keys/{key}", json={"value": "new"})
    assert resp.status_code == 201
    assert resp.json() == {"key": key, "value": "new", "version": 1}
    history = api("GET", f"/api/v1/keys/{key}/history").json()
    assert history["versions"] == [{"version": 1, "value": "new"}]


def test_compare_and_set_with_matching_version_succeeds(api, prefix):
    key = prefix + "cas"
    api("PUT", f"/api/v1/keys/{key}", json={"value": "a"})
    api("PUT", f"/api/v1/keys/{key}", json={"value": "b"})
    resp = api("PUT", f"/api/v1/keys/{key}", json={"value": "c", "expected_version": 2})
    assert resp.status_code == 200
    assert resp.json() == {"key": key, "value": "c", "version": 3}


def test_compare_and_set_mismatch_is_409_and_writes_nothing(api, prefix, assert_error):
    key = prefix + "conflict"
    api("PUT", f"/api/v1/keys/{key}", json={"value": "a"})
    api("PUT", f"/api/v1/keys/{key}", json={"value": "b"})
    body = assert_error(
        api("PUT", f"/api/v1/keys/{key}", json={"value": "x", "expected_version": 1}),
        409, "version_conflict")
    assert body["current_version"] == 2
    assert api("GET", f"/api/v1/keys/{key}").json() == {"key": key, "value": "b", "version": 2}


def test_expected_version_zero_means_create_only(api, prefix, assert_error):
    key = prefix + "once"
    first = api("PUT", f"/api/v1/keys/{key}", json={"value": 1, "expected_version": 0})
    assert first.status_code == 201
    assert first.json()["version"] == 1
    body = assert_error(
        api("PUT", f"/api/v1/keys/{key}", json={"value": 2, "expected_version": 0}),
        409, "version_conflict")
    assert body["current_version"] == 1
    # A missing key is at version 0, so any other expectation conflicts.
    body = assert_error(
        api("PUT", f"/api/v1/keys/{prefix}absent", json={"value": 1, "expected_version": 3}),
        409, "version_conflict")
    assert body["current_version"] == 0
    assert api("GET", f"/api/v1/keys/{prefix}absent").status_code == 404
