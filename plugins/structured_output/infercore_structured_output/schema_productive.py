"""Whether a JSON schema admits any finite document: recursion through required parts never ends."""

from __future__ import annotations

from typing import Any

_LEAF_TYPES = frozenset({"string", "number", "integer", "boolean", "null"})
#: Subschemas visited before the check gives up and lets the schema through (a few tens of ms of CPU).
_VISIT_BUDGET = 50_000


class _OutOfBudget(Exception):
    """The schema is too large and recursive to judge cheaply."""


def _resolve(root: Any, ref: str) -> Any:
    """The subschema a local ``$ref`` (``#`` or ``#/a/b``) points at; None when it points nowhere."""
    node = root
    for part in ref[1:].split("/")[1:] if ref.startswith("#/") else []:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return None
    return node


class _Finiteness:
    """Least fixed point over the schema's ``$ref`` targets: a target is finite once some document of
    finite size satisfies it, assuming only targets already known to be finite."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.finite_refs: set[str] = set()
        self.seen_refs: set[str] = set()
        self.visits_left = _VISIT_BUDGET

    def finite(self, schema: Any) -> bool:
        self.visits_left -= 1
        if self.visits_left < 0:
            raise _OutOfBudget
        if isinstance(schema, bool):
            return schema
        if not isinstance(schema, dict):
            return True
        ref = schema.get("$ref")
        if isinstance(ref, str) and ref.startswith("#"):
            self.seen_refs.add(ref)
            if _resolve(self.root, ref) is not None and ref not in self.finite_refs:
                return False
        if not all(self.finite(s) for s in schema.get("allOf", []) if isinstance(schema.get("allOf"), list)):
            return False
        for key in ("anyOf", "oneOf"):
            options = schema.get(key)
            if isinstance(options, list) and options and not any(self.finite(s) for s in options):
                return False
        return self._some_type_finite(schema)

    def _some_type_finite(self, schema: dict[str, Any]) -> bool:
        if "const" in schema or "enum" in schema:
            return True
        declared = schema.get("type")
        types = {declared} if isinstance(declared, str) else set(declared) if isinstance(declared, list) else None
        if types is None or types & _LEAF_TYPES:
            return True  # untyped or a leaf type: some finite value fits
        if "object" in types and self._object_finite(schema):
            return True
        return "array" in types and self._array_finite(schema)

    def _object_finite(self, schema: dict[str, Any]) -> bool:
        properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = schema.get("required") if isinstance(schema.get("required"), list) else []
        return all(self.finite(properties.get(name, True)) for name in required if isinstance(name, str))

    def _array_finite(self, schema: dict[str, Any]) -> bool:
        needed = schema.get("minItems", 0) if isinstance(schema.get("minItems"), int) else 0
        prefix = schema.get("prefixItems") if isinstance(schema.get("prefixItems"), list) else []
        if not all(self.finite(s) for s in prefix[:needed]):
            return False
        return needed <= len(prefix) or self.finite(schema.get("items", True))

    def solve(self) -> bool:
        while True:
            before = (len(self.finite_refs), len(self.seen_refs))
            root_finite = self.finite(self.root)
            for ref in list(self.seen_refs):
                if ref not in self.finite_refs and self.finite(_resolve(self.root, ref)):
                    self.finite_refs.add(ref)
            if (len(self.finite_refs), len(self.seen_refs)) == before:
                return root_finite


def admits_finite_document(schema: Any) -> bool:
    """False when every document the schema allows would nest forever (a required property, or a
    required array item, that refers back to its own schema with no way out). A schema too large and
    recursive to judge within a fixed budget counts as finite."""
    try:
        return _Finiteness(schema).solve()
    except _OutOfBudget:
        return True
