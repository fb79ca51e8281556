"""The structural diff: walk two JSON Schemas side by side and classify every difference.

Each difference becomes a ``Change`` located by a JSON pointer, with the effect the rules give it
in each direction (``Effect``). The rules are those of the checklist in the conformance anchors
(5.4): a *relaxation* (the new schema accepts more here) is safe for new readers of old
documents and may break old readers of new documents; a *restriction* is the reverse.

Two things keep the rules sound rather than merely plausible:

- *polarity*: under ``not`` a relaxation of the subschema restricts the whole, and under ``if``
  or ``oneOf`` neither is known, so effects are flipped or made unknown there; a definition in
  ``$defs`` takes the polarity of the places that reference it (and is inert if none does);
- *objects are compared key by key*: what a property name may hold is its ``properties`` entry
  if there is one, else ``additionalProperties`` (``true`` when absent). Adding an optional
  property to a closed object is then a relaxation and adding it to an open one a restriction,
  from one rule, as Robert Yokota's analysis of content models concludes.

Where no rule decides, the effect is ``UNKNOWN``; a generated document may still settle it (see
``search``), and the verdict is never "compatible" on a guess.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from servesim_conformance.evolution.keywords import (
    ANNOTATIONS,
    LOWER_BOUNDS,
    UPPER_BOUNDS,
    canonical_value,
    type_atoms,
    value_set,
)
from servesim_conformance.evolution.model import Change, Effect
from servesim_conformance.evolution.pointers import child, resolve_local
from servesim_conformance.evolution.rules import (
    Polarity,
    Shape,
    bound_value,
    content_model,
    effects,
    key_schema,
    looser,
    normal_form,
    numeric_bound,
    ref_polarities,
    renames,
    same_meaning,
    version_list,
)

#: The root pointer of the version member; its changes are the version bump itself.
VERSION_POINTER = "/properties/schema_version"


#: Keywords this walk understands; any other keyword that differs is an unknown change.
_HANDLED = (
    ANNOTATIONS
    | LOWER_BOUNDS
    | UPPER_BOUNDS
    | {
        "$schema",
        "$id",
        "$anchor",
        "$defs",
        "$ref",
        "type",
        "const",
        "enum",
        "multipleOf",
        "pattern",
        "format",
        "uniqueItems",
        "required",
        "properties",
        "additionalProperties",
        "patternProperties",
        "propertyNames",
        "dependentRequired",
        "dependentSchemas",
        "items",
        "prefixItems",
        "contains",
        "if",
        "then",
        "else",
        "allOf",
        "anyOf",
        "oneOf",
        "not",
    }
)


@dataclass
class _Walk:
    """One comparison in progress: the two roots and the changes found so far."""

    old_root: Any
    new_root: Any
    changes: list[Change] = field(default_factory=list)
    referenced: dict[str, set[int]] = field(default_factory=dict)
    followed: set[tuple[str, str]] = field(default_factory=set)

    # --- emitting ------------------------------------------------------------------------

    def emit(
        self,
        pointer: str,
        kind: str,
        shape: Shape,
        polarity: Polarity,
        *,
        old: Any = None,
        new: Any = None,
        detail: str = "",
        keyword: str | None = None,
        types: tuple[frozenset[str], frozenset[str]] | None = None,
        keys: tuple[str, ...] = (),
    ) -> None:
        backward, forward = effects(shape, polarity, keyword, types)
        self.changes.append(
            Change(
                pointer=pointer,
                kind=kind,
                backward=backward,
                forward=forward,
                detail=detail,
                old=old,
                new=new,
                keys=keys,
            )
        )

    def effective(self, pointer: str, polarity: Polarity) -> Polarity:
        """``polarity`` combined with that of every reference into (an ancestor of) ``pointer``."""
        found: set[int] = set() if polarity is None else {polarity}
        for target, polarities in self.referenced.items():
            if pointer == target or pointer.startswith(target + "/"):
                found |= polarities
        if not found:
            return None
        return found.pop() if len(found) == 1 else 0

    def aggregate(
        self, old: Any, new: Any, pointer: str, polarity: Polarity
    ) -> tuple[Effect, Effect]:
        """The combined effects of every change between ``old`` and ``new``, without emitting."""
        inner = _Walk(self.old_root, self.new_root, referenced=self.referenced)
        inner.node(old, new, pointer, polarity)
        backward = forward = Effect.SAFE
        for change in inner.changes:
            backward = backward.worst(change.backward)
            forward = forward.worst(change.forward)
        return backward, forward

    # --- the walk --------------------------------------------------------------------------

    def node(self, old: Any, new: Any, pointer: str, polarity: Polarity) -> None:
        """Compare two subschemas found at ``pointer`` in both schemas."""
        polarity = self.effective(pointer, polarity)
        if pointer == VERSION_POINTER:
            self.version(old, new, pointer)
            return
        if isinstance(old, bool) or isinstance(new, bool):
            if self.booleans(old, new, pointer, polarity):
                return
            old = {} if old is True else old
            new = {} if new is True else new
        if not isinstance(old, dict) or not isinstance(new, dict):
            if old != new:
                self.emit(pointer, "schema_changed", Shape.UNKNOWN, polarity, old=old, new=new)
            return
        types = (type_atoms(old), type_atoms(new))
        self.annotations(old, new, pointer)
        self.identity(old, new, pointer, polarity)
        self.type(old, new, pointer, polarity)
        self.values(old, new, pointer, polarity)
        self.bounds(old, new, pointer, polarity, types)
        self.multiple_of(old, new, pointer, polarity, types)
        self.strings(old, new, pointer, polarity, types)
        self.unique_items(old, new, pointer, polarity, types)
        self.objects(old, new, pointer, polarity, types)
        self.arrays(old, new, pointer, polarity, types)
        self.conditions(old, new, pointer, polarity)
        self.combinators(old, new, pointer, polarity)
        self.reference(old, new, pointer, polarity)
        self.definitions(old, new, pointer)
        for keyword in sorted((set(old) | set(new)) - _HANDLED):
            if canonical_value(old.get(keyword)) != canonical_value(new.get(keyword)):
                self.emit(
                    child(pointer, keyword),
                    "keyword_changed",
                    Shape.UNKNOWN,
                    polarity,
                    old=old.get(keyword),
                    new=new.get(keyword),
                    detail=f"no rule for {keyword!r}",
                )

    def version(self, old: Any, new: Any, pointer: str) -> None:
        """The version member: its change is the version bump, judged by the policy, not here.

        Documents are compared with their version relabelled (see ``oracle``), so the bump never
        makes a document valid or invalid by itself.
        """
        before, after = value_set(old), value_set(new)
        if before != after:
            self.emit(
                pointer,
                "version_changed",
                Shape.ANNOTATION,
                1,
                old=version_list(old),
                new=version_list(new),
            )

    def booleans(self, old: Any, new: Any, pointer: str, polarity: Polarity) -> bool:
        """``true``/``false`` schemas; True when the comparison is complete."""
        if normal_form(old) == normal_form(new):
            return True
        opened = pointer.endswith("/additionalProperties")
        if new is False:
            kind = "content_model_closed" if opened else "schema_forbidden"
            self.emit(pointer, kind, Shape.RESTRICT, polarity, old=old, new=new)
            return True
        if old is False:
            kind = "content_model_opened" if opened else "schema_allowed"
            self.emit(pointer, kind, Shape.RELAX, polarity, old=old, new=new)
            return True
        return False

    def annotations(self, old: dict[str, Any], new: dict[str, Any], pointer: str) -> None:
        for keyword in sorted(ANNOTATIONS & (set(old) | set(new))):
            if old.get(keyword) != new.get(keyword):
                self.emit(
                    child(pointer, keyword),
                    "annotation_changed",
                    Shape.ANNOTATION,
                    1,
                    old=old.get(keyword),
                    new=new.get(keyword),
                )

    def identity(
        self, old: dict[str, Any], new: dict[str, Any], pointer: str, polarity: Polarity
    ) -> None:
        if old.get("$id") != new.get("$id"):
            self.emit(
                child(pointer, "$id"),
                "id_changed",
                Shape.ANNOTATION,
                1,
                old=old.get("$id"),
                new=new.get("$id"),
                detail="only local references are used, so validation is unchanged",
            )
        for keyword in ("$schema", "$anchor"):
            if old.get(keyword) != new.get(keyword):
                self.emit(
                    child(pointer, keyword),
                    "dialect_changed" if keyword == "$schema" else "anchor_changed",
                    Shape.UNKNOWN,
                    polarity,
                    old=old.get(keyword),
                    new=new.get(keyword),
                )

    def type(
        self, old: dict[str, Any], new: dict[str, Any], pointer: str, polarity: Polarity
    ) -> None:
        before, after = type_atoms(old), type_atoms(new)
        if before == after:
            return
        if before < after:
            kind, shape = "type_widened", Shape.RELAX
        elif after < before:
            kind, shape = "type_narrowed", Shape.RESTRICT
        else:
            kind, shape = "type_changed", Shape.CHANGE
        self.emit(
            child(pointer, "type"), kind, shape, polarity, old=old.get("type"), new=new.get("type")
        )

    def values(
        self, old: dict[str, Any], new: dict[str, Any], pointer: str, polarity: Polarity
    ) -> None:
        before, after = value_set(old), value_set(new)
        if before == after:
            return
        if before is None:
            kind, shape = "enum_added", Shape.RESTRICT
        elif after is None:
            kind, shape = "enum_removed", Shape.RELAX
        elif before < after:
            kind, shape = "enum_extended", Shape.RELAX
        elif after < before:
            kind, shape = "enum_narrowed", Shape.RESTRICT
        else:
            kind, shape = "enum_changed", Shape.CHANGE
        keyword = "enum" if "enum" in new or ("enum" in old and "const" not in new) else "const"
        self.emit(
            child(pointer, keyword),
            kind,
            shape,
            polarity,
            old=old.get("enum", old.get("const")),
            new=new.get("enum", new.get("const")),
            keys=(child(pointer, "enum"),),
        )

    def bounds(
        self,
        old: dict[str, Any],
        new: dict[str, Any],
        pointer: str,
        polarity: Polarity,
        types: tuple[frozenset[str], frozenset[str]],
    ) -> None:
        """Numeric, length, size and count bounds, an inclusive and exclusive pair taken as one."""
        numeric = [("minimum", "exclusiveMinimum", True), ("maximum", "exclusiveMaximum", False)]
        for inclusive, exclusive, lower in numeric:
            before = numeric_bound(old, inclusive, exclusive, lower, types[0])
            after = numeric_bound(new, inclusive, exclusive, lower, types[1])
            if before == after:
                continue
            keyword = (
                exclusive
                if exclusive in new or (exclusive in old and inclusive not in new)
                else inclusive
            )
            self.bound(pointer, keyword, inclusive, before, after, lower, polarity, types, old, new)
        for keyword in sorted(
            (LOWER_BOUNDS | UPPER_BOUNDS)
            - {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
        ):
            before_value, after_value = old.get(keyword), new.get(keyword)
            if before_value == after_value:
                continue
            lower = keyword in LOWER_BOUNDS
            before = None if before_value is None else (Fraction(str(before_value)), False)
            after = None if after_value is None else (Fraction(str(after_value)), False)
            self.bound(pointer, keyword, keyword, before, after, lower, polarity, types, old, new)

    def bound(
        self,
        pointer: str,
        keyword: str,
        family: str,
        before: tuple[Fraction, bool] | None,
        after: tuple[Fraction, bool] | None,
        lower: bool,
        polarity: Polarity,
        types: tuple[frozenset[str], frozenset[str]],
        old: dict[str, Any],
        new: dict[str, Any],
    ) -> None:
        if before is None:
            kind, shape = "bound_added", Shape.RESTRICT
        elif after is None:
            kind, shape = "bound_removed", Shape.RELAX
        else:
            relaxed = looser(after, before, lower)
            kind = "bound_loosened" if relaxed else "bound_tightened"
            shape = Shape.RELAX if relaxed else Shape.RESTRICT
        self.emit(
            child(pointer, keyword),
            kind,
            shape,
            polarity,
            old=bound_value(old, keyword, family),
            new=bound_value(new, keyword, family),
            keyword=family,
            types=types,
            keys=(child(pointer, family),),
        )

    def multiple_of(
        self,
        old: dict[str, Any],
        new: dict[str, Any],
        pointer: str,
        polarity: Polarity,
        types: tuple[frozenset[str], frozenset[str]],
    ) -> None:
        before, after = old.get("multipleOf"), new.get("multipleOf")
        if before == after:
            return
        if before is None:
            kind, shape = "bound_added", Shape.RESTRICT
        elif after is None:
            kind, shape = "bound_removed", Shape.RELAX
        else:
            ratio_old = Fraction(str(before)) / Fraction(str(after))
            ratio_new = Fraction(str(after)) / Fraction(str(before))
            if ratio_old.denominator == 1:  # every multiple of the old step is one of the new
                kind, shape = "bound_loosened", Shape.RELAX
            elif ratio_new.denominator == 1:
                kind, shape = "bound_tightened", Shape.RESTRICT
            else:
                kind, shape = "bound_changed", Shape.CHANGE
        self.emit(
            child(pointer, "multipleOf"),
            kind,
            shape,
            polarity,
            old=before,
            new=after,
            keyword="multipleOf",
            types=types,
        )

    def strings(
        self,
        old: dict[str, Any],
        new: dict[str, Any],
        pointer: str,
        polarity: Polarity,
        types: tuple[frozenset[str], frozenset[str]],
    ) -> None:
        before, after = old.get("pattern"), new.get("pattern")
        if before != after:
            if before is None:
                kind, shape = "pattern_added", Shape.RESTRICT
            elif after is None:
                kind, shape = "pattern_removed", Shape.RELAX
            else:
                kind, shape = "pattern_changed", Shape.UNKNOWN
            self.emit(
                child(pointer, "pattern"),
                kind,
                shape,
                polarity,
                old=before,
                new=after,
                keyword="pattern",
                types=types,
            )
        if old.get("format") != new.get("format"):
            self.emit(
                child(pointer, "format"),
                "format_changed",
                Shape.UNKNOWN,
                polarity,
                old=old.get("format"),
                new=new.get("format"),
                keyword="format",
                types=types,
                detail="formats are asserted by some readers and not by others",
            )

    def unique_items(
        self,
        old: dict[str, Any],
        new: dict[str, Any],
        pointer: str,
        polarity: Polarity,
        types: tuple[frozenset[str], frozenset[str]],
    ) -> None:
        before, after = bool(old.get("uniqueItems", False)), bool(new.get("uniqueItems", False))
        if before != after:
            self.emit(
                child(pointer, "uniqueItems"),
                "unique_items_added" if after else "unique_items_removed",
                Shape.RESTRICT if after else Shape.RELAX,
                polarity,
                old=old.get("uniqueItems"),
                new=new.get("uniqueItems"),
                keyword="uniqueItems",
                types=types,
            )

    # --- objects ---------------------------------------------------------------------------

    def objects(
        self,
        old: dict[str, Any],
        new: dict[str, Any],
        pointer: str,
        polarity: Polarity,
        types: tuple[frozenset[str], frozenset[str]],
    ) -> None:
        old_properties: dict[str, Any] = old.get("properties", {})
        new_properties: dict[str, Any] = new.get("properties", {})
        old_required = set(old.get("required", []))
        new_required = set(new.get("required", []))
        if canonical_value(old.get("patternProperties", {})) != canonical_value(
            new.get("patternProperties", {})
        ):
            self.emit(
                child(pointer, "patternProperties"),
                "pattern_properties_changed",
                Shape.UNKNOWN,
                polarity,
                old=old.get("patternProperties"),
                new=new.get("patternProperties"),
            )
        added = [name for name in new_properties if name not in old_properties]
        removed = [name for name in old_properties if name not in new_properties]
        renamed = renames(old_properties, new_properties, removed, added)
        for name, subschema in old_properties.items():
            if name in new_properties:
                self.node(
                    subschema, new_properties[name], child(pointer, "properties", name), polarity
                )
        for old_name, new_name in renamed.items():
            self.rename(old, new, pointer, polarity, old_name, new_name, old_required, new_required)
        for name in removed:
            if name not in renamed:
                self.property(old, new, pointer, polarity, name, "property_removed")
        for name in added:
            if name not in renamed.values():
                self.property(old, new, pointer, polarity, name, "property_added")
        if "additionalProperties" in old or "additionalProperties" in new:
            self.node(
                old.get("additionalProperties", True),
                new.get("additionalProperties", True),
                child(pointer, "additionalProperties"),
                polarity,
            )
        if "propertyNames" in old or "propertyNames" in new:
            self.node(
                old.get("propertyNames", True),
                new.get("propertyNames", True),
                child(pointer, "propertyNames"),
                polarity,
            )
        settled = set(renamed) | set(renamed.values())
        for name in sorted(new_required - old_required - settled):
            self.emit(
                child(pointer, "required"),
                "required_added",
                Shape.RESTRICT,
                polarity,
                new=name,
                detail=name,
                keyword="required",
                types=types,
                keys=(child(pointer, "required", name),),
            )
        for name in sorted(old_required - new_required - settled):
            self.emit(
                child(pointer, "required"),
                "required_removed",
                Shape.RELAX,
                polarity,
                old=name,
                detail=name,
                keyword="required",
                types=types,
                keys=(child(pointer, "required", name),),
            )
        self.dependencies(old, new, pointer, polarity, types)

    def property(
        self,
        old: dict[str, Any],
        new: dict[str, Any],
        pointer: str,
        polarity: Polarity,
        name: str,
        kind: str,
    ) -> None:
        """A property declared on one side only: compare what each side lets that key hold."""
        before, after = key_schema(old, name), key_schema(new, name)
        where = child(pointer, "properties", name)
        model = content_model(old if kind == "property_added" else new)
        if before is None or after is None:
            backward = forward = Effect.UNKNOWN
        else:
            backward, forward = self.aggregate(before, after, where, polarity)
        self.changes.append(
            Change(
                pointer=where,
                kind=kind,
                backward=backward,
                forward=forward,
                detail=f"{name}, in a {model}",
                old=None if kind == "property_added" else old["properties"][name],
                new=new["properties"][name] if kind == "property_added" else None,
                keys=(where,),
            )
        )

    def rename(
        self,
        old: dict[str, Any],
        new: dict[str, Any],
        pointer: str,
        polarity: Polarity,
        old_name: str,
        new_name: str,
        old_required: set[str],
        new_required: set[str],
    ) -> None:
        """A property removed and another added with the same meaning: one change, a rename.

        Its effects are those of its parts (the removal, the addition, and any change of which
        of the two names is required), so the rename is judged exactly as the edits it is.
        """
        parts: list[tuple[Effect, Effect]] = []
        for name in (old_name, new_name):
            before, after = key_schema(old, name), key_schema(new, name)
            if before is None or after is None:
                parts.append((Effect.UNKNOWN, Effect.UNKNOWN))
            else:
                parts.append(
                    self.aggregate(before, after, child(pointer, "properties", name), polarity)
                )
        for name in (old_name, new_name):
            if (name in old_required) != (name in new_required):
                shape = Shape.RESTRICT if name in new_required else Shape.RELAX
                parts.append(effects(shape, polarity))
        backward = forward = Effect.SAFE
        for part_backward, part_forward in parts:
            backward, forward = backward.worst(part_backward), forward.worst(part_forward)
        self.changes.append(
            Change(
                pointer=child(pointer, "properties", old_name),
                kind="property_renamed",
                backward=backward,
                forward=forward,
                detail=f"{old_name} -> {new_name}, in a {content_model(new)}",
                old=old_name,
                new=new_name,
                keys=(
                    child(pointer, "properties", old_name),
                    child(pointer, "properties", new_name),
                    child(pointer, "required", old_name),
                    child(pointer, "required", new_name),
                ),
            )
        )

    def dependencies(
        self,
        old: dict[str, Any],
        new: dict[str, Any],
        pointer: str,
        polarity: Polarity,
        types: tuple[frozenset[str], frozenset[str]],
    ) -> None:
        old_required: dict[str, list[str]] = old.get("dependentRequired", {})
        new_required: dict[str, list[str]] = new.get("dependentRequired", {})
        for key in sorted(set(old_required) | set(new_required)):
            before, after = set(old_required.get(key, [])), set(new_required.get(key, []))
            if before == after:
                continue
            shape = (
                Shape.RESTRICT
                if after > before
                else Shape.RELAX
                if after < before
                else Shape.CHANGE
            )
            self.emit(
                child(pointer, "dependentRequired", key),
                "dependency_changed",
                shape,
                polarity,
                old=sorted(before),
                new=sorted(after),
                keyword="dependentRequired",
                types=types,
            )
        old_schemas: dict[str, Any] = old.get("dependentSchemas", {})
        new_schemas: dict[str, Any] = new.get("dependentSchemas", {})
        for key in list(old_schemas) + [key for key in new_schemas if key not in old_schemas]:
            where = child(pointer, "dependentSchemas", key)
            if key in old_schemas and key in new_schemas:
                self.node(old_schemas[key], new_schemas[key], where, polarity)
                continue
            backward, forward = self.aggregate(
                old_schemas.get(key, True), new_schemas.get(key, True), where, polarity
            )
            self.changes.append(
                Change(
                    pointer=where,
                    kind="dependency_added" if key in new_schemas else "dependency_removed",
                    backward=backward,
                    forward=forward,
                    detail=f"when {key!r} is present",
                    old=old_schemas.get(key),
                    new=new_schemas.get(key),
                )
            )

    # --- arrays ----------------------------------------------------------------------------

    def arrays(
        self,
        old: dict[str, Any],
        new: dict[str, Any],
        pointer: str,
        polarity: Polarity,
        types: tuple[frozenset[str], frozenset[str]],
    ) -> None:
        old_prefix: list[Any] = old.get("prefixItems", [])
        new_prefix: list[Any] = new.get("prefixItems", [])
        if len(old_prefix) != len(new_prefix):
            self.emit(
                child(pointer, "prefixItems"),
                "prefix_items_changed",
                Shape.UNKNOWN,
                polarity,
                old=len(old_prefix),
                new=len(new_prefix),
                detail="positions moved between prefixItems and items",
            )
        else:
            for index, (before, after) in enumerate(zip(old_prefix, new_prefix, strict=True)):
                self.node(before, after, child(pointer, "prefixItems", index), polarity)
        if "items" in old or "items" in new:
            self.node(
                old.get("items", True), new.get("items", True), child(pointer, "items"), polarity
            )
        if "contains" in old or "contains" in new:
            if "contains" not in old or "contains" not in new:
                added = "contains" in new
                self.emit(
                    child(pointer, "contains"),
                    "contains_added" if added else "contains_removed",
                    Shape.RESTRICT if added else Shape.RELAX,
                    polarity,
                    keyword="contains",
                    types=types,
                )
            else:
                self.node(old["contains"], new["contains"], child(pointer, "contains"), polarity)

    # --- applicators ------------------------------------------------------------------------

    def conditions(
        self, old: dict[str, Any], new: dict[str, Any], pointer: str, polarity: Polarity
    ) -> None:
        """``if``/``then``/``else``: branches are compared only while the condition is the same."""
        if "if" not in old and "if" not in new:
            return
        condition_same = "if" in old and "if" in new and same_meaning(old["if"], new["if"])
        if "if" in old and "if" in new:
            self.annotations_only(old["if"], new["if"], child(pointer, "if"))
        if not condition_same:
            self.emit(
                child(pointer, "if"),
                "condition_changed",
                Shape.UNKNOWN,
                polarity,
                old=old.get("if"),
                new=new.get("if"),
            )
        branch_polarity = polarity if condition_same else 0
        for branch in ("then", "else"):
            if branch in old or branch in new:
                self.node(
                    old.get(branch, True),
                    new.get(branch, True),
                    child(pointer, branch),
                    branch_polarity,
                )

    def annotations_only(self, old: Any, new: Any, pointer: str) -> None:
        """Report annotation edits inside a subschema whose meaning did not change."""
        if same_meaning(old, new):
            inner = _Walk(self.old_root, self.new_root, referenced=self.referenced)
            inner.node(old, new, pointer, 1)
            self.changes.extend(change for change in inner.changes if change.is_annotation)

    def combinators(
        self, old: dict[str, Any], new: dict[str, Any], pointer: str, polarity: Polarity
    ) -> None:
        for keyword, added_shape in (
            ("allOf", Shape.RESTRICT),
            ("anyOf", Shape.RELAX),
            ("oneOf", Shape.UNKNOWN),
        ):
            before: list[Any] = old.get(keyword, [])
            after: list[Any] = new.get(keyword, [])
            if not before and not after:
                continue
            inner: Polarity = 0 if keyword == "oneOf" else polarity
            if not before or not after:
                # The applicator itself appears or goes: any branch now has to match, or no
                # longer has to (an empty allOf is no constraint, so it is the same rule).
                self.emit(
                    child(pointer, keyword),
                    "combinator_added" if after else "combinator_removed",
                    Shape.RESTRICT if after else Shape.RELAX,
                    inner if keyword == "oneOf" else polarity,
                    old=before or None,
                    new=after or None,
                )
                continue
            if len(before) == len(after):
                for index, (left, right) in enumerate(zip(before, after, strict=True)):
                    self.node(left, right, child(pointer, keyword, index), inner)
                continue
            removed_shape = {Shape.RESTRICT: Shape.RELAX, Shape.RELAX: Shape.RESTRICT}.get(
                added_shape, Shape.UNKNOWN
            )
            unmatched_new = [
                index
                for index, right in enumerate(after)
                if not any(same_meaning(left, right) for left in before)
            ]
            unmatched_old = [
                index
                for index, left in enumerate(before)
                if not any(same_meaning(left, right) for right in after)
            ]
            for index in unmatched_new:
                self.emit(
                    child(pointer, keyword, index),
                    "branch_added",
                    added_shape,
                    polarity,
                    new=after[index],
                )
            for index in unmatched_old:
                self.emit(
                    child(pointer, keyword, index),
                    "branch_removed",
                    removed_shape,
                    polarity,
                    old=before[index],
                )
        if "not" in old or "not" in new:
            if "not" in old and "not" in new:
                flipped = None if polarity is None else -polarity
                self.node(old["not"], new["not"], child(pointer, "not"), flipped)
            else:
                added = "not" in new
                self.emit(
                    child(pointer, "not"),
                    "not_added" if added else "not_removed",
                    Shape.RESTRICT if added else Shape.RELAX,
                    polarity,
                    old=old.get("not"),
                    new=new.get("not"),
                )

    def reference(
        self, old: dict[str, Any], new: dict[str, Any], pointer: str, polarity: Polarity
    ) -> None:
        """A ``$ref`` that now points elsewhere: compare what the two targets accept, here."""
        before, after = old.get("$ref"), new.get("$ref")
        if before == after:
            return
        where = child(pointer, "$ref")
        if before is None or after is None:
            present = str(after if before is None else before)
            target = resolve_local(self.new_root if before is None else self.old_root, present)
            if target is None:
                self.emit(
                    where, "reference_changed", Shape.UNKNOWN, polarity, old=before, new=after
                )
                return
            old_target = True if before is None else target
            new_target = target if before is None else True
            self.node(old_target, new_target, where, polarity)
            return
        old_target = resolve_local(self.old_root, before)
        new_target = resolve_local(self.new_root, after)
        if old_target is None or new_target is None or (before, after) in self.followed:
            self.emit(where, "reference_changed", Shape.UNKNOWN, polarity, old=before, new=after)
            return
        self.followed.add((before, after))
        self.node(old_target, new_target, where, polarity)

    def definitions(self, old: dict[str, Any], new: dict[str, Any], pointer: str) -> None:
        """``$defs``: compared where they are, with the polarity of their references."""
        old_defs: dict[str, Any] = old.get("$defs", {})
        new_defs: dict[str, Any] = new.get("$defs", {})
        for name in list(old_defs) + [name for name in new_defs if name not in old_defs]:
            where = child(pointer, "$defs", name)
            if name in old_defs and name in new_defs:
                self.node(old_defs[name], new_defs[name], where, None)
            else:
                self.emit(
                    where,
                    "definition_added" if name in new_defs else "definition_removed",
                    Shape.ANNOTATION,
                    1,
                    detail="a definition matters only where a $ref uses it",
                )


def diff_schemas(old: Any, new: Any) -> list[Change]:
    """Every change from schema ``old`` to schema ``new``, with its effects, in walk order."""
    walk = _Walk(old, new)
    for source in (old, new):
        for target, polarities in ref_polarities(source).items():
            walk.referenced.setdefault(target, set()).update(polarities)
    walk.node(old, new, "", 1)
    return walk.changes
