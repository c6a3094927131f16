"""Validation, unknown routes and wrong methods all answer with the JSON error envelope."""
from __future__ import annotations


def test_invalid_key_is_400(api, prefix, assert_error):
    too_long = "k" * 65
    for key in [too_long, "has space", "semi;colon", "star*", "caf%C3%A9"]:
        assert_error(api("PUT", f"/api/v1/keys/{key}", json={"value": 1}), 400, "invalid_key")
        assert_error(api("GET", f"/api/v1/keys/{key}"), 400, "invalid_key")
    assert_error(api("DELETE", f"/api/v1/keys/{too_long}"), 400, "invalid_key")
    assert_error(api("GET", f"/api/v1/keys/{too_long}/history"), 400, "invalid_key")


def test_invalid_counter_name_is_400(api, assert_error):
    resp = api("POST", f"/api/v1/counters/{'c' * 65}/increment", json={"by": 1})
    assert_error(resp, 400, "invalid_key")
    assert_error(api("POST", "/api/v1/counters/bad!name/increment"), 400, "invalid_key")


def test_invalid_json_body_is_400(api, prefix, assert_error):
    headers = {"Content-Type": "application/json"}
    for raw in ['{"value": ', "not json", ""]:
        resp = api("PUT", f"/api/v1/keys/{prefix}bad", data=raw, headers=headers)
        assert_error(resp, 400, "invalid_json")
    resp = api("POST", f"/api/v1/counters/{prefix}c/increment", data="{by: 2}", headers=headers)
    assert_error(resp, 400, "invalid_json")
    assert api("GET", f"/api/v1/keys/{prefix}bad").status_code == 404


def test_put_body_must_be_object_with_value(api, prefix, assert_error):
    key = prefix + "shape"
    for body in [[1, 2], "value", 3, {"val": 1}, {}]:
        assert_error(api("PUT", f"/api/v1/keys/{key}", json=body), 400, "validation_error")
    assert api("GET", f"/api/v1/keys/{key}").status_code == 404


def test_put_invalid_expected_version_is_400(api, prefix, assert_error):
    key = prefix + "ev"
    api("PUT", f"/api/v1/keys/{key}", json={"value": 1})
    for expected in [-1, "1", 1.5, True, None]:
        resp = api("PUT", f"/api/v1/keys/{key}", json={"value": 2, "expected_version": expected})
        assert_error(resp, 400, "validation_error")
    assert api("GET", f"/api/v1/keys/{key}").json()["version"] == 1


def test_unknown_route_is_404_json(api, prefix, assert_error):
    for path in ["/api/v1/nothing-here", f"/api/v1/keys/{prefix}a/extra/parts", "/api/v2/keys"]:
        assert_error(api("GET", path), 404, "not_found")


def test_wrong_method_is_405_json(api, prefix, assert_error):
    key = prefix + "m"
    cases = [
        ("POST", f"/api/v1/keys/{key}"),
        ("PATCH", f"/api/v1/keys/{key}"),
        ("DELETE", "/api/v1/keys"),
        ("PUT", f"/api/v1/keys/{key}/history"),
        ("GET", f"/api/v1/counters/{key}/increment"),
        ("POST", "/health"),
    ]
    for method, path in cases:
        assert_error(api(method, path, json={"value": 1}), 405, "method_not_allowed")
    resp = api("PATCH", f"/api/v1/keys/{key}")
    allowed = {m.strip() for m in resp.headers.get("Allow", "").split(",")}
    assert {"GET", "PUT", "DELETE"} <= allowed
