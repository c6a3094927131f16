"""Listing keys by prefix and reading a key's history."""
from __future__ import annotations


def test_list_by_prefix_is_sorted_and_exact(api, prefix):
    names = ["b", "item-9", "B", "item-10", "a"]
    for name in names:
        assert api("PUT", f"/api/v1/keys/{prefix}{name}", json={"value": name}).status_code == 201
    api("PUT", f"/api/v1/keys/x{prefix}other", json={"value": "not mine"})
    resp = api("GET", "/api/v1/keys", params={"prefix": prefix})
    assert resp.status_code == 200
    # Plain character-code order: uppercase before lowercase, "1" before "9".
    expected = [prefix + n for n in ["B", "a", "b", "item-10", "item-9"]]
    assert resp.json() == {"keys": expected, "total": 5}


def test_list_limit_cuts_result_but_total_counts_all(api, prefix):
    for name in ["c", "a", "d", "b"]:
        api("PUT", f"/api/v1/keys/{prefix}{name}", json={"value": 0})
    resp = api("GET", "/api/v1/keys", params={"prefix": prefix, "limit": 2})
    assert resp.status_code == 200
    assert resp.json() == {"keys": [prefix + "a", prefix + "b"], "total": 4}


def test_list_default_limit_is_100(api, prefix):
    for i in range(101):
        api("PUT", f"/api/v1/keys/{prefix}{i:03d}", json={"value": i})
    body = api("GET", "/api/v1/keys", params={"prefix": prefix}).json()
    assert body["total"] == 101
    assert body["keys"] == [f"{prefix}{i:03d}" for i in range(100)]
    full = api("GET", "/api/v1/keys", params={"prefix": prefix, "limit": 1000}).json()
    assert len(full["keys"]) == 101


def test_list_excludes_deleted_keys(api, prefix):
    for name in ["keep", "drop"]:
        api("PUT", f"/api/v1/keys/{prefix}{name}", json={"value": name})
    assert api("DELETE", f"/api/v1/keys/{prefix}drop").status_code == 204
    resp = api("GET", "/api/v1/keys", params={"prefix": prefix})
    assert resp.json() == {"keys": [prefix + "keep"], "total": 1}


def test_list_without_matches_is_empty(api, prefix):
    resp = api("GET", "/api/v1/keys", params={"prefix": prefix + "nothing"})
    assert resp.status_code == 200
    assert resp.json() == {"keys": [], "total": 0}


def test_list_without_prefix_includes_new_key(api, prefix):
    key = prefix + "anywhere"
    api("PUT", f"/api/v1/keys/{key}", json={"value": 1})
    body = api("GET", "/api/v1/keys", params={"limit": 1000}).json()
    assert body["total"] >= 1
    assert body["keys"] == sorted(body["keys"])
    assert len(body["keys"]) <= 1000
    if body["total"] <= 1000:
        assert key in body["keys"]


def test_list_invalid_limit_is_400(api, prefix, assert_error):
    for limit in ["0", "1001", "-1", "abc", "2.5"]:
        resp = api("GET", "/api/v1/keys", params={"prefix": prefix, "limit": limit})
        assert_error(resp, 400, "validation_error")


def test_history_lists_every_version_oldest_first(api, prefix):
    key = prefix + "hist"
    values = ["first", {"second": True}, None, ["fourth"]]
    for value in values:
        api("PUT", f"/api/v1/keys/{key}", json={"value": value})
    resp = api("GET", f"/api/v1/keys/{key}/history")
    assert resp.status_code == 200
    assert resp.json() == {
        "key": key,
        "versions": [{"version": i, "value": v} for i, v in enumerate(values, start=1)],
    }


def test_history_of_missing_key_is_404(api, prefix, assert_error):
    assert_error(api("GET", f"/api/v1/keys/{prefix}ghost/history"), 404, "key_not_found")
