"""Check a decoded value against the JSON Schema subset the builders ask for: ``type`` (object, array,
string, integer, number, boolean), ``properties``, ``required``, ``additionalProperties: false``,
``enum``, ``anyOf``, ``minLength``/``maxLength``/``pattern`` and ``items``/``minItems``/``maxItems``."""

from __future__ import annotations

import re

from esgexp.errors import UserError

TYPES = {
    "object": dict, "array": list, "string": str, "boolean": bool,
    "integer": int, "number": (int, float),
}  # fmt: skip


def object_schema(**properties: dict) -> dict:
    """An object with exactly these properties, all required, in this order (the order they are generated in)."""
    return {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}


FAST_REPEAT = 128  # xgrammar's token masks stay cached up to this bounded repetition; beyond, 11 ms a token (measured)


def question_schema(max_chars: int) -> dict:
    """A question: 10 to ``max_chars`` characters, a capital first, one question mark at its end, no quote,
    backslash or control character. Decoders that read a pattern alone (xgrammar, llama.cpp) get the upper
    bound inside it when it is at most ``FAST_REPEAT + 2``; a longer bound is left to :func:`schema_problems`."""
    if max_chars < 10:
        raise UserError(f"builder.max_question_chars: at least 10, got {max_chars}")
    repeat = f"{{8,{max_chars - 2}}}" if max_chars - 2 <= FAST_REPEAT else "{8,}"
    return {
        "type": "string",
        "minLength": 10,
        "maxLength": max_chars,
        "pattern": rf'^[A-Z][^?"\\\x00-\x1f]{repeat}[?]$',
    }


def schema_problems(value, schema: dict, where: str = "$") -> list[str]:
    """Every way ``value`` breaks ``schema``, each naming its place (``$.evidence[0]``); empty when it fits."""
    if "anyOf" in schema:
        return _any_of_problems(value, schema["anyOf"], where)
    kind = schema.get("type")
    if kind is not None and not _is_type(value, kind):
        return [f"{where}: expected {kind}, got {type(value).__name__}"]
    if "enum" in schema and value not in schema["enum"]:
        return [f"{where}: {_short(repr(value))} is not one of the {len(schema['enum'])} allowed values"]
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            return [f"{where}: shorter than {schema['minLength']} characters"]
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            return [f"{where}: longer than {schema['maxLength']} characters"]
        if "pattern" in schema and not re.search(schema["pattern"], value):
            return [f"{where}: {_short(repr(value))} does not match the pattern {schema['pattern']}"]
    if isinstance(value, list):
        return _array_problems(value, schema, where)
    if isinstance(value, dict):
        return _object_problems(value, schema, where)
    return []


def _any_of_problems(value, alternatives: list[dict], where: str) -> list[str]:
    """None when one alternative fits; else the problems of the alternative that comes closest."""
    found = [schema_problems(value, alternative, where) for alternative in alternatives]
    if any(not problems for problems in found):
        return []
    return [f"{where}: fits none of the {len(alternatives)} alternatives; closest: " + "; ".join(min(found, key=len))]


def _array_problems(value: list, schema: dict, where: str) -> list[str]:
    if len(value) < schema.get("minItems", 0):
        return [f"{where}: fewer than {schema['minItems']} items"]
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        return [f"{where}: more than {schema['maxItems']} items"]
    items = schema.get("items", {})
    return [problem for i, entry in enumerate(value) for problem in schema_problems(entry, items, f"{where}[{i}]")]


def _object_problems(value: dict, schema: dict, where: str) -> list[str]:
    properties = schema.get("properties", {})
    found = [f"{where}: missing {name!r}" for name in schema.get("required", []) if name not in value]
    if schema.get("additionalProperties") is False:
        found += [f"{where}: unexpected key {name!r}" for name in value if name not in properties]
    for name, sub in properties.items():
        if name in value:
            found += schema_problems(value[name], sub, f"{where}.{name}")
    return found


def _is_type(value, kind: str) -> bool:
    if isinstance(value, bool) and kind in ("integer", "number"):
        return False
    return isinstance(value, TYPES[kind])


def _short(value, width: int = 60) -> str:
    text = str(value)
    return text if len(text) <= width else text[: width - 3] + "..."
