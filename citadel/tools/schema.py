"""The JSON Schemas of tools: the rules they follow, their validators, and what failed, for people.

A tool's argument schema is the only gate between a model's (possibly document-influenced) output and
a system of record, so it is checked harder than JSON Schema requires:

- it is a valid Draft 2020-12 schema (`check_schema`);
- "closed": every object it declares sets `additionalProperties: false`, so a call cannot smuggle a
  field the tool would pass on, and every `required` name is a declared property (else no call could
  ever satisfy it);
- `patternProperties` is refused (it would open a closed object by pattern, and jsonschema runs it
  with Python's backtracking `re`); `$ref` must be local (`#...`): nothing is fetched at call time;
- every `pattern` runs on RE2 (`google-re2`), linear in the input, like every pattern on untrusted
  text in this project (citadel/regex.py); a pattern RE2 cannot compile is refused at load.

Response schemas follow the same rules except "closed": a system may add fields to its responses.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from functools import lru_cache
from itertools import islice
from typing import Any

import re2
from jsonschema import Draft202012Validator, ValidationError, validators
from jsonschema.exceptions import SchemaError

from citadel.regex import translate

# Deeper nesting than this is a mistake, and bounds the recursion of the walk below.
MAX_SCHEMA_DEPTH = 32
# How many errors one validation reads, and how many a summary names: bounded work, readable detail.
MAX_ERRORS_READ = 50
MAX_ERRORS_SHOWN = 5
# How much of a path or a name a summary quotes: the instance is untrusted text.
MAX_QUOTED_CHARS = 60

_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.log_errors = False  # a refused pattern is reported by the loader, not logged by RE2

# Keywords whose value is one subschema, a mapping of name -> subschema, or a list of subschemas.
_ONE = ("additionalProperties", "items", "contains", "not", "if", "then", "else", "propertyNames",
        "unevaluatedItems", "unevaluatedProperties")
_BY_NAME = ("properties", "$defs", "dependentSchemas")
_LISTED = ("allOf", "anyOf", "oneOf", "prefixItems")


class SchemaProblem(ValueError):
    """A schema breaks one of the rules above; the message says where and how."""


@lru_cache(maxsize=1024)
def linear_pattern(pattern: str):
    try:
        return re2.compile(translate(pattern), _RE2_OPTIONS)
    except (re2.error, ValueError) as error:
        raise SchemaProblem(f"pattern {pattern[:MAX_QUOTED_CHARS]!r} is not supported (RE2): {error}") from None


def _pattern(validator, pattern: str, instance: Any, schema: Mapping[str, Any]) -> Iterator[ValidationError]:
    """The `pattern` keyword on RE2 instead of Python's backtracking `re`."""
    if not validator.is_type(instance, "string"):
        return
    try:
        matched = linear_pattern(pattern).search(instance) is not None
    except UnicodeEncodeError:  # a lone surrogate (JSON can carry one; UTF-8 cannot): no match
        matched = False
    if not matched:
        yield ValidationError(f"does not match {pattern!r}")


ToolSchemaValidator = validators.extend(Draft202012Validator, {"pattern": _pattern})


def _subschemas(schema: Mapping[str, Any], where: str, depth: int = 0) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """`schema` and every schema inside it, with a JSON-pointer-like location (boolean schemas skipped)."""
    if depth > MAX_SCHEMA_DEPTH:
        raise SchemaProblem(f"{where}: nested deeper than {MAX_SCHEMA_DEPTH} levels")
    yield where, schema
    for keyword in _ONE:
        if isinstance(schema.get(keyword), Mapping):
            yield from _subschemas(schema[keyword], f"{where}/{keyword}", depth + 1)
    for keyword in _BY_NAME:
        for name, sub in (schema.get(keyword) or {}).items():
            if isinstance(sub, Mapping):
                yield from _subschemas(sub, f"{where}/{keyword}/{name}", depth + 1)
    for keyword in _LISTED:
        for index, sub in enumerate(schema.get(keyword) or ()):
            if isinstance(sub, Mapping):
                yield from _subschemas(sub, f"{where}/{keyword}/{index}", depth + 1)


def _declares_object(schema: Mapping[str, Any]) -> bool:
    kind = schema.get("type")
    return kind == "object" or (isinstance(kind, list) and "object" in kind)


def check_tool_schema(schema: Any, *, closed: bool) -> None:
    """SchemaProblem unless `schema` is a valid Draft 2020-12 schema following this module's rules;
    `closed` (argument schemas): the top level is an object and every declared object is closed."""
    if not isinstance(schema, Mapping):
        raise SchemaProblem("must be a JSON Schema object (a mapping)")
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        where = "/".join(str(part) for part in error.absolute_path) or "top level"
        raise SchemaProblem(f"not a valid JSON Schema (Draft 2020-12) at {where}: {error.message[:200]}") from None
    except RecursionError:
        raise SchemaProblem(f"nested deeper than {MAX_SCHEMA_DEPTH} levels") from None
    if closed and schema.get("type") != "object":
        raise SchemaProblem('must have "type": "object" (a call passes named arguments)')
    for pointer, sub in _subschemas(schema, "#"):
        where = "the top level" if pointer == "#" else pointer
        if "patternProperties" in sub:
            raise SchemaProblem(f"{where}: patternProperties is not allowed; list the properties")
        for keyword in ("$ref", "$dynamicRef"):
            if keyword in sub and not str(sub[keyword]).startswith("#"):
                raise SchemaProblem(f"{where}: only local references ('#/...') are allowed in {keyword}")
        if "pattern" in sub:
            linear_pattern(sub["pattern"])
        if closed and _declares_object(sub):
            if sub.get("additionalProperties") is not False:
                raise SchemaProblem(f"{where}: an object must set additionalProperties: false, so a call "
                                    "cannot pass fields the schema does not name")
            undeclared = sorted(set(sub.get("required", ())) - set(sub.get("properties", {})))
            if undeclared:
                raise SchemaProblem(f"{where}: required names undeclared properties {undeclared}")


def validator_for(schema: Mapping[str, Any]) -> Draft202012Validator:
    """A validator for a schema that passed `check_tool_schema`."""
    return ToolSchemaValidator(schema)


def _quote(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= MAX_QUOTED_CHARS else text[:MAX_QUOTED_CHARS] + "…"


_PHRASES = {
    "maximum": "must be at most {}",
    "minimum": "must be at least {}",
    "exclusiveMaximum": "must be below {}",
    "exclusiveMinimum": "must be above {}",
    "maxLength": "must be at most {} characters",
    "minLength": "must be at least {} characters",
    "maxItems": "must have at most {} items",
    "minItems": "must have at least {} items",
    "type": "must be of type {}",
    "enum": "must be one of {}",
    "const": "must be {}",
    "pattern": "must match {}",
}


def _describe(error: ValidationError, whole: str) -> str:
    """One problem as a short sentence. It names the place and the rule, never the offending value:
    the value is untrusted text that flows back to the user and the model."""
    where = _quote(".".join(str(part) for part in error.absolute_path)) or whole
    keyword, expected, instance = error.validator, error.validator_value, error.instance
    if keyword == "required" and isinstance(instance, Mapping):
        missing = [name for name in expected if name not in instance]
        return f"{where}: missing {', '.join(_quote(name) for name in missing)}"
    if keyword == "additionalProperties" and isinstance(instance, Mapping):
        declared = error.schema.get("properties", {})
        extra = sorted(str(name) for name in instance if name not in declared)
        shown = ", ".join(repr(_quote(name)) for name in extra[:3]) + (" …" if len(extra) > 3 else "")
        return f"{where}: unexpected {shown}"
    phrase = _PHRASES.get(str(keyword))
    if phrase is not None:
        return f"{where}: {phrase.format(_quote(expected))}"
    return f"{where}: fails {keyword}"


def problems(validator: Draft202012Validator, instance: Any, whole: str) -> list[str]:
    """What is wrong with `instance`, as at most MAX_ERRORS_SHOWN sentences (plus "and N more");
    empty when it is valid. `whole` names the instance itself ("arguments", "response")."""
    errors = list(islice(validator.iter_errors(instance), MAX_ERRORS_READ))
    errors.sort(key=lambda e: ([str(part) for part in e.absolute_path], str(e.validator)))
    lines = [_describe(error, whole) for error in errors[:MAX_ERRORS_SHOWN]]
    if len(errors) > MAX_ERRORS_SHOWN:
        more = len(errors) - MAX_ERRORS_SHOWN
        lines.append(f"and {more}{'+' if len(errors) == MAX_ERRORS_READ else ''} more")
    return lines
