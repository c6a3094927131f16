"""Tool schemas in the subset every model family accepts: a verb's input schema built from its
declared parameters, an answer model's output schema with every reference inlined, and the
written rules both are checked against (`violations`).

Why a subset: Gemini-family models reject union types, `$ref`/`$defs` and
`additionalProperties` in function declarations (gemini-cli issues #13326 and #13694,
copilot-cli #4623), Cursor with a Gemini model rejects `$schema`, Anthropic's API refuses
`anyOf` at the top level of an input schema, and Copilot CLI refuses an object schema without
`properties` (copilot-cli #1825). So an input schema is an object whose properties each have one
plain type and a description; an optional argument is simply absent from `required` (its
default is told in the description); nothing else appears.

Output schemas never reach a model's function declaration, but clients compile them (gemini-cli
resolves references while it discovers tools) and validate `structuredContent` against them, so
they keep the same subset except that a value that may be null says so as
`anyOf: [<schema>, {"type": "null"}]` (the only union allowed, and only in output schemas).
Validation of the arguments themselves is the verb's pydantic model (mcp_server/tools.py): the
published schema only describes it.
"""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, cast

from bridge.sessions.verbspec import REQUIRED, Verb

#: what a session_id argument means, said once for every verb that acts on a session
SESSION_ID_HELP = (
    "the session to act on (start_task returned it). Optional: without it the call means this "
    "client's own current session (stdio: the server's session; HTTP: the session started with "
    "this client's credential, or on this client's MCP connection). An HTTP client that has "
    "neither its own credential nor an MCP session must pass it."
)

PLAIN_TYPES = frozenset({"object", "string", "number", "integer", "boolean", "array"})
INPUT_KEYS = frozenset({"type", "description", "properties", "required", "items", "enum"})
OUTPUT_KEYS = INPUT_KEYS | {"anyOf"}
_NULL = {"type": "null"}
_SCALARS: dict[Any, str] = {str: "string", float: "number", int: "integer", bool: "boolean"}


def _optional_inner(tp: Any) -> Any:
    """`X | None` -> X (an optional argument is one left out of `required`); anything else as is."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        members = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(members) == 1:
            return members[0]
        raise TypeError(f"argument type {tp} is a union: the portable subset has none")
    return tp


def param_schema(tp: Any, description: str) -> dict[str, Any]:
    """The schema of one argument: one plain type (an enum of strings for a Literal) and its description."""
    inner = _optional_inner(tp)
    if typing.get_origin(inner) is Literal:
        values = list(typing.get_args(inner))
        if not all(isinstance(v, str) for v in values):
            raise TypeError(f"argument type {tp}: only string literals are portable")
        return {"type": "string", "enum": values, "description": description}
    if inner in _SCALARS:
        return {"type": _SCALARS[inner], "description": description}
    raise TypeError(f"argument type {tp} has no portable schema (str, int, float, bool or a string Literal)")


def input_schema(verb: Verb) -> dict[str, Any]:
    """The input schema of `verb`'s tool: its parameters, then (for a verb acting on a session)
    the optional session_id."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    for p in verb.params:
        help_text = p.help
        if p.default is REQUIRED:
            required.append(p.name)
        elif p.default not in (None, ""):
            help_text = f"{help_text}; default {p.default!r}"  # the portable subset has no `default`
        properties[p.name] = param_schema(p.type, help_text)
    if verb.session == "existing":
        properties["session_id"] = param_schema(str, SESSION_ID_HELP)
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


def output_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A JSON schema (pydantic's, with `$defs`) rewritten into the output subset: references
    inlined, keys outside the subset dropped (titles, defaults, `additionalProperties: true`,
    formats), `const` as a one-value `enum`."""
    defs = schema.get("$defs", {})

    def walk(node: Any, seen: tuple[str, ...]) -> Any:
        if isinstance(node, list):
            return [walk(item, seen) for item in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref")
        if isinstance(ref, str):
            name = ref.removeprefix("#/$defs/")
            if name in seen or name not in defs:
                raise ValueError(f"output schema reference {ref} is recursive or undefined: it cannot be inlined")
            merged = {**defs[name], **{k: v for k, v in node.items() if k != "$ref"}}
            return walk(merged, (*seen, name))
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "properties" and isinstance(value, dict):
                out[key] = {name: walk(sub, seen) for name, sub in value.items()}
            elif key == "const":
                out["enum"] = [value]
            elif key in OUTPUT_KEYS:
                out[key] = walk(value, seen)
        if out.get("type") == "object":
            out.setdefault("properties", {})
        return out

    return cast(dict[str, Any], walk(schema, ()))  # a dict walks to a dict


def violations(schema: Any, *, output: bool, path: str = "") -> list[str]:
    """Every place `schema` leaves the portable subset (empty when it keeps to it), each as
    `<json path>: <rule broken>`. Input schemas: every property has a description."""
    allowed = OUTPUT_KEYS if output else INPUT_KEYS
    found: list[str] = []
    where = path or "/"
    if not isinstance(schema, dict):
        return [f"{where}: not a schema object"]
    for key in schema:
        if key not in allowed:
            found.append(f"{where}: key {key!r} is outside the portable subset")
    if "anyOf" in schema:
        members = schema["anyOf"]
        nullable = isinstance(members, list) and len(members) == 2 and _NULL in members
        if not nullable or set(schema) - {"anyOf", "description"}:
            found.append(f"{where}: a union other than a nullable value ([schema, null])")
        for index, member in enumerate(members if isinstance(members, list) else []):
            if member != _NULL:
                found += violations(member, output=output, path=f"{path}/anyOf/{index}")
        return found
    kind = schema.get("type")
    if kind is None and output and path and set(schema) <= {"description"}:
        return found  # any JSON value (an open field of an answer)
    if not isinstance(kind, str) or kind not in PLAIN_TYPES:
        found.append(f"{where}: type {kind!r} is not one plain type")
    if kind == "object":
        properties = schema.get("properties")
        if not isinstance(properties, dict):
            found.append(f"{where}: an object without 'properties'")
            properties = {}
        required = schema.get("required", [])
        if not isinstance(required, list) or not set(required) <= set(properties):
            found.append(f"{where}: 'required' names a property that is not declared")
        for name, sub in properties.items():
            if not output and path == "" and not (isinstance(sub, dict) and sub.get("description")):
                found.append(f"{path}/{name}: an argument without a description")
            found += violations(sub, output=output, path=f"{path}/{name}")
    elif kind == "array":
        found += violations(schema.get("items"), output=output, path=f"{path}/items")
    if "enum" in schema and not (isinstance(schema["enum"], list) and schema["enum"]):
        found.append(f"{where}: an empty or malformed enum")
    return found
