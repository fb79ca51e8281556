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

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any, TypeVar

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


_Value = TypeVar("_Value")


def _added_removed_or(
    name: str,
    before: _Value | None,
    after: _Value | None,
    both: Callable[[_Value, _Value], tuple[str, Shape]],
) -> tuple[str, Shape]:
    """A constraint on one side only is ``<name>_added`` (a restriction) or ``<name>_removed``
    (a relaxation); on both sides, ``both`` judges how it changed."""
    if before is None:
        return f"{name}_added", Shape.RESTRICT
    if after is None:
        return f"{name}_removed", Shape.RELAX
    return both(before, after)


def _set_change(
    name: str, grown: str, before: frozenset[Any], after: frozenset[Any]
) -> tuple[str, Shape]:
    """Two sets of what is accepted (types, values): a superset relaxes, a subset restricts."""
    if before < after:
        return f"{name}_{grown}", Shape.RELAX
    if after < before:
        return f"{name}_narrowed", Shape.RESTRICT
    return f"{name}_changed", Shape.CHANGE


def _step_change(before: Any, after: Any) -> tuple[str, Shape]:
    """``multipleOf`` on both sides: a step that divides the old one accepts every old multiple."""
    ratio_old = Fraction(str(before)) / Fraction(str(after))
    ratio_new = Fraction(str(after)) / Fraction(str(before))
    if ratio_old.denominator == 1:
        return "bound_loosened", Shape.RELAX
    if ratio_new.denominator == 1:
        return "bound_tightened", Shape.RESTRICT
    return "bound_changed", Shape.CHANGE


#: Stands for "the keyword's own value in that schema" where a change's old or new value is given.
_KEYWORD_VALUE: Any = object()


@dataclass(frozen=True)
class _Site:
    """Two object subschemas at the same pointer: everything a keyword's rule reads there."""

    old: dict[str, Any]
    new: dict[str, Any]
    pointer: str
    polarity: Polarity
    types: tuple[frozenset[str], frozenset[str]]

    def both(self, keyword: str) -> tuple[Any, Any]:
        """``keyword``'s value in the old and the new subschema (None where absent)."""
        return self.old.get(keyword), self.new.get(keyword)

    def differs(self, keyword: str) -> bool:
        """Whether ``keyword``'s value is not the same on both sides (absent is None)."""
        before, after = self.both(keyword)
        return bool(before != after)

    def required(self) -> tuple[set[str], set[str]]:
        """The property names each side requires."""
        return set(self.old.get("required", [])), set(self.new.get("required", []))

    def under(self, polarity: Polarity) -> _Site:
        """The same place, seen under another polarity (inside ``not``, ``oneOf``, a branch)."""
        return replace(self, polarity=polarity)


@dataclass
class _Walk:
    """One comparison in progress: the two roots and the changes found so far."""

    old_root: Any
    new_root: Any
    changes: list[Change] = field(default_factory=list)
    referenced: dict[str, set[int]] = field(default_factory=dict)
    followed: set[tuple[str | None, str | None]] = field(default_factory=set)

    # --- emitting ------------------------------------------------------------------------

    def record(
        self,
        pointer: str,
        kind: str,
        effect: tuple[Effect, Effect],
        *,
        old: Any = None,
        new: Any = None,
        detail: str = "",
        keys: tuple[str, ...] = (),
    ) -> None:
        """Add a change whose (backward, forward) ``effect`` is already known."""
        backward, forward = effect
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
        """Add a change of ``shape``, its effects given by the rules (``rules.effects``)."""
        effect = effects(shape, polarity, keyword, types)
        self.record(pointer, kind, effect, old=old, new=new, detail=detail, keys=keys)

    def emit_keyword(
        self,
        site: _Site,
        keyword: str,
        kind: str,
        shape: Shape,
        *,
        below: tuple[str | int, ...] = (),
        old: Any = _KEYWORD_VALUE,
        new: Any = _KEYWORD_VALUE,
        detail: str = "",
        keys: tuple[str, ...] = (),
    ) -> None:
        """A change of ``keyword`` at ``site`` (or ``below`` it), all located from the one name.

        The pointer, the keyword the rules weigh and the types come from ``site`` and
        ``keyword``; ``old`` and ``new`` default to the keyword's value on each side. The rules
        use the keyword and types only for a keyword that constrains some types alone, and then
        only to soften a break, so they are given for every keyword.
        """
        before, after = site.both(keyword)
        self.emit(
            child(site.pointer, keyword, *below),
            kind,
            shape,
            site.polarity,
            old=before if old is _KEYWORD_VALUE else old,
            new=after if new is _KEYWORD_VALUE else new,
            detail=detail,
            keyword=keyword,
            types=site.types,
            keys=keys,
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
        inner = _Walk(
            self.old_root, self.new_root, referenced=self.referenced, followed=set(self.followed)
        )
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
        site = _Site(old, new, pointer, polarity, (type_atoms(old), type_atoms(new)))
        for rule in (
            self.annotations,
            self.identity,
            self.type,
            self.values,
            self.bounds,
            self.multiple_of,
            self.strings,
            self.unique_items,
            self.objects,
            self.arrays,
            self.conditions,
            self.combinators,
            self.reference,
            self.definitions,
            self.unhandled,
        ):
            rule(site)

    def subschema(self, site: _Site, keyword: str) -> None:
        """Compare the subschemas under ``keyword`` if either side has one (absent is ``true``)."""
        if keyword in site.old or keyword in site.new:
            self.node(
                site.old.get(keyword, True),
                site.new.get(keyword, True),
                child(site.pointer, keyword),
                site.polarity,
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

    def annotations(self, site: _Site) -> None:
        """Annotation edits: safe at any polarity, since no reader accepts more or less."""
        for keyword in sorted(ANNOTATIONS & (set(site.old) | set(site.new))):
            if site.differs(keyword):
                self.emit_keyword(site, keyword, "annotation_changed", Shape.ANNOTATION)

    def identity(self, site: _Site) -> None:
        if site.differs("$id"):
            self.emit_keyword(
                site,
                "$id",
                "id_changed",
                Shape.ANNOTATION,
                detail="only local references are used, so validation is unchanged",
            )
        for keyword in ("$schema", "$anchor"):
            if site.differs(keyword):
                kind = "dialect_changed" if keyword == "$schema" else "anchor_changed"
                self.emit_keyword(site, keyword, kind, Shape.UNKNOWN)

    def type(self, site: _Site) -> None:
        before, after = site.types
        if before != after:
            self.emit_keyword(site, "type", *_set_change("type", "widened", before, after))

    def values(self, site: _Site) -> None:
        old, new = site.old, site.new
        before, after = value_set(old), value_set(new)
        if before == after:
            return
        kind, shape = _added_removed_or(
            "enum",
            before,
            after,
            lambda before, after: _set_change("enum", "extended", before, after),
        )
        keyword = "enum" if "enum" in new or ("enum" in old and "const" not in new) else "const"
        self.emit_keyword(
            site,
            keyword,
            kind,
            shape,
            old=old.get("enum", old.get("const")),
            new=new.get("enum", new.get("const")),
            keys=(child(site.pointer, "enum"),),
        )

    def bounds(self, site: _Site) -> None:
        """Numeric, length, size and count bounds, an inclusive and exclusive pair taken as one."""
        old, new = site.old, site.new
        numeric = [("minimum", "exclusiveMinimum", True), ("maximum", "exclusiveMaximum", False)]
        for inclusive, exclusive, lower in numeric:
            before = numeric_bound(old, inclusive, exclusive, lower, site.types[0])
            after = numeric_bound(new, inclusive, exclusive, lower, site.types[1])
            if before == after:
                continue
            keyword = (
                exclusive
                if exclusive in new or (exclusive in old and inclusive not in new)
                else inclusive
            )
            self.bound(site, keyword, inclusive, before, after, lower)
        for keyword in sorted(
            (LOWER_BOUNDS | UPPER_BOUNDS)
            - {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}
        ):
            before_value, after_value = site.both(keyword)
            if before_value == after_value:
                continue
            before = None if before_value is None else (Fraction(str(before_value)), False)
            after = None if after_value is None else (Fraction(str(after_value)), False)
            self.bound(site, keyword, keyword, before, after, keyword in LOWER_BOUNDS)

    def bound(
        self,
        site: _Site,
        keyword: str,
        family: str,
        before: tuple[Fraction, bool] | None,
        after: tuple[Fraction, bool] | None,
        lower: bool,
    ) -> None:
        """One bound that moved; ``keyword`` is how it is spelled now, ``family`` its rule."""
        kind, shape = _added_removed_or(
            "bound",
            before,
            after,
            lambda before, after: (
                ("bound_loosened", Shape.RELAX)
                if looser(after, before, lower)
                else ("bound_tightened", Shape.RESTRICT)
            ),
        )
        self.emit(
            child(site.pointer, keyword),
            kind,
            shape,
            site.polarity,
            old=bound_value(site.old, keyword, family),
            new=bound_value(site.new, keyword, family),
            keyword=family,
            types=site.types,
            keys=(child(site.pointer, family),),
        )

    def multiple_of(self, site: _Site) -> None:
        before, after = site.both("multipleOf")
        if before != after:
            kind, shape = _added_removed_or("bound", before, after, _step_change)
            self.emit_keyword(site, "multipleOf", kind, shape)

    def strings(self, site: _Site) -> None:
        before, after = site.both("pattern")
        if before != after:
            kind, shape = _added_removed_or(
                "pattern", before, after, lambda _old, _new: ("pattern_changed", Shape.UNKNOWN)
            )
            self.emit_keyword(site, "pattern", kind, shape)
        if site.differs("format"):
            self.emit_keyword(
                site,
                "format",
                "format_changed",
                Shape.UNKNOWN,
                detail="formats are asserted by some readers and not by others",
            )

    def unique_items(self, site: _Site) -> None:
        before, after = (bool(value) for value in site.both("uniqueItems"))
        if before != after:
            kind = "unique_items_added" if after else "unique_items_removed"
            self.emit_keyword(site, "uniqueItems", kind, Shape.RESTRICT if after else Shape.RELAX)

    # --- objects ---------------------------------------------------------------------------

    def objects(self, site: _Site) -> None:
        old_properties: dict[str, Any] = site.old.get("properties", {})
        new_properties: dict[str, Any] = site.new.get("properties", {})
        old_required, new_required = site.required()
        if canonical_value(site.old.get("patternProperties", {})) != canonical_value(
            site.new.get("patternProperties", {})
        ):
            self.emit_keyword(
                site, "patternProperties", "pattern_properties_changed", Shape.UNKNOWN
            )
        added = [name for name in new_properties if name not in old_properties]
        removed = [name for name in old_properties if name not in new_properties]
        renamed = renames(old_properties, new_properties, removed, added)
        for name, subschema in old_properties.items():
            if name in new_properties:
                where = child(site.pointer, "properties", name)
                self.node(subschema, new_properties[name], where, site.polarity)
        for old_name, new_name in renamed.items():
            self.rename(site, old_name, new_name)
        for name in removed:
            if name not in renamed:
                self.property(site, name, "property_removed")
        for name in added:
            if name not in renamed.values():
                self.property(site, name, "property_added")
        self.subschema(site, "additionalProperties")
        self.subschema(site, "propertyNames")
        settled = set(renamed) | set(renamed.values())
        for kind, shape, names in (
            ("required_added", Shape.RESTRICT, new_required - old_required),
            ("required_removed", Shape.RELAX, old_required - new_required),
        ):
            for name in sorted(names - settled):
                self.emit_keyword(
                    site,
                    "required",
                    kind,
                    shape,
                    old=None if kind == "required_added" else name,
                    new=name if kind == "required_added" else None,
                    detail=name,
                    keys=(child(site.pointer, "required", name),),
                )
        self.dependencies(site)

    def property(self, site: _Site, name: str, kind: str) -> None:
        """A property declared on one side only: compare what each side lets that key hold."""
        old, new = site.old, site.new
        before, after = key_schema(old, name), key_schema(new, name)
        where = child(site.pointer, "properties", name)
        model = content_model(old if kind == "property_added" else new)
        if before is None or after is None:
            effect = (Effect.UNKNOWN, Effect.UNKNOWN)
        else:
            effect = self.aggregate(before, after, where, site.polarity)
        self.record(
            where,
            kind,
            effect,
            detail=f"{name}, in a {model}",
            old=None if kind == "property_added" else old["properties"][name],
            new=new["properties"][name] if kind == "property_added" else None,
            keys=(where,),
        )

    def rename(self, site: _Site, old_name: str, new_name: str) -> None:
        """A property removed and another added with the same meaning: one change, a rename.

        Its effects are those of its parts (the removal, the addition, and any change of which
        of the two names is required), so the rename is judged exactly as the edits it is.
        """
        old_required, new_required = site.required()
        parts: list[tuple[Effect, Effect]] = []
        for name in (old_name, new_name):
            before, after = key_schema(site.old, name), key_schema(site.new, name)
            if before is None or after is None:
                parts.append((Effect.UNKNOWN, Effect.UNKNOWN))
            else:
                where = child(site.pointer, "properties", name)
                parts.append(self.aggregate(before, after, where, site.polarity))
        for name in (old_name, new_name):
            if (name in old_required) != (name in new_required):
                shape = Shape.RESTRICT if name in new_required else Shape.RELAX
                parts.append(effects(shape, site.polarity))
        backward = forward = Effect.SAFE
        for part_backward, part_forward in parts:
            backward, forward = backward.worst(part_backward), forward.worst(part_forward)
        self.record(
            child(site.pointer, "properties", old_name),
            "property_renamed",
            (backward, forward),
            detail=f"{old_name} -> {new_name}, in a {content_model(site.new)}",
            old=old_name,
            new=new_name,
            keys=tuple(
                child(site.pointer, keyword, name)
                for keyword in ("properties", "required")
                for name in (old_name, new_name)
            ),
        )

    def dependencies(self, site: _Site) -> None:
        old_required: dict[str, list[str]] = site.old.get("dependentRequired", {})
        new_required: dict[str, list[str]] = site.new.get("dependentRequired", {})
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
            self.emit_keyword(
                site,
                "dependentRequired",
                "dependency_changed",
                shape,
                below=(key,),
                old=sorted(before),
                new=sorted(after),
            )
        old_schemas: dict[str, Any] = site.old.get("dependentSchemas", {})
        new_schemas: dict[str, Any] = site.new.get("dependentSchemas", {})
        for key in list(old_schemas) + [key for key in new_schemas if key not in old_schemas]:
            where = child(site.pointer, "dependentSchemas", key)
            if key in old_schemas and key in new_schemas:
                self.node(old_schemas[key], new_schemas[key], where, site.polarity)
                continue
            self.record(
                where,
                "dependency_added" if key in new_schemas else "dependency_removed",
                self.aggregate(
                    old_schemas.get(key, True), new_schemas.get(key, True), where, site.polarity
                ),
                detail=f"when {key!r} is present",
                old=old_schemas.get(key),
                new=new_schemas.get(key),
            )

    # --- arrays ----------------------------------------------------------------------------

    def arrays(self, site: _Site) -> None:
        old_prefix: list[Any] = site.old.get("prefixItems", [])
        new_prefix: list[Any] = site.new.get("prefixItems", [])
        if len(old_prefix) != len(new_prefix):
            self.emit_keyword(
                site,
                "prefixItems",
                "prefix_items_changed",
                Shape.UNKNOWN,
                old=len(old_prefix),
                new=len(new_prefix),
                detail="positions moved between prefixItems and items",
            )
        else:
            for index, (before, after) in enumerate(zip(old_prefix, new_prefix, strict=True)):
                self.node(before, after, child(site.pointer, "prefixItems", index), site.polarity)
        self.subschema(site, "items")
        if ("contains" in site.old) != ("contains" in site.new):
            added = "contains" in site.new
            self.emit_keyword(
                site,
                "contains",
                "contains_added" if added else "contains_removed",
                Shape.RESTRICT if added else Shape.RELAX,
                old=None,
                new=None,
            )
        else:
            self.subschema(site, "contains")

    # --- applicators ------------------------------------------------------------------------

    def conditions(self, site: _Site) -> None:
        """``if``/``then``/``else``: branches are compared only while the condition is the same."""
        old, new = site.old, site.new
        if "if" not in old and "if" not in new:
            return
        condition_same = "if" in old and "if" in new and same_meaning(old["if"], new["if"])
        if "if" in old and "if" in new:
            self.annotations_only(old["if"], new["if"], child(site.pointer, "if"))
        if not condition_same:
            self.emit_keyword(site, "if", "condition_changed", Shape.UNKNOWN)
        branches = site if condition_same else site.under(0)
        for branch in ("then", "else"):
            self.subschema(branches, branch)

    def annotations_only(self, old: Any, new: Any, pointer: str) -> None:
        """Report annotation edits inside a subschema whose meaning did not change."""
        if same_meaning(old, new):
            inner = _Walk(
                self.old_root,
                self.new_root,
                referenced=self.referenced,
                followed=set(self.followed),
            )
            inner.node(old, new, pointer, 1)
            self.changes.extend(change for change in inner.changes if change.is_annotation)

    def combinators(self, site: _Site) -> None:
        for keyword, added_shape in (
            ("allOf", Shape.RESTRICT),
            ("anyOf", Shape.RELAX),
            ("oneOf", Shape.UNKNOWN),
        ):
            before: list[Any] = site.old.get(keyword, [])
            after: list[Any] = site.new.get(keyword, [])
            if not before and not after:
                continue
            inner = site.under(0) if keyword == "oneOf" else site
            if not before or not after:
                # The applicator itself appears or goes: any branch now has to match, or no
                # longer has to (an empty allOf is no constraint, so it is the same rule).
                self.emit_keyword(
                    inner,
                    keyword,
                    "combinator_added" if after else "combinator_removed",
                    Shape.RESTRICT if after else Shape.RELAX,
                    old=before or None,
                    new=after or None,
                )
                continue
            if len(before) == len(after):
                for index, (left, right) in enumerate(zip(before, after, strict=True)):
                    self.node(left, right, child(site.pointer, keyword, index), inner.polarity)
                continue
            self.branches(site, keyword, added_shape, before, after)
        if "not" in site.old and "not" in site.new:
            self.subschema(site.under(None if site.polarity is None else -site.polarity), "not")
        elif "not" in site.old or "not" in site.new:
            added = "not" in site.new
            self.emit_keyword(
                site,
                "not",
                "not_added" if added else "not_removed",
                Shape.RESTRICT if added else Shape.RELAX,
            )

    def branches(
        self, site: _Site, keyword: str, added_shape: Shape, before: list[Any], after: list[Any]
    ) -> None:
        """Branches of ``keyword`` with no branch of the same meaning on the other side."""
        removed_shape = {Shape.RESTRICT: Shape.RELAX, Shape.RELAX: Shape.RESTRICT}.get(
            added_shape, Shape.UNKNOWN
        )
        for index, right in enumerate(after):
            if not any(same_meaning(left, right) for left in before):
                self.emit_keyword(
                    site, keyword, "branch_added", added_shape, below=(index,), old=None, new=right
                )
        for index, left in enumerate(before):
            if not any(same_meaning(left, right) for right in after):
                self.emit_keyword(
                    site,
                    keyword,
                    "branch_removed",
                    removed_shape,
                    below=(index,),
                    old=left,
                    new=None,
                )

    def reference(self, site: _Site) -> None:
        """A ``$ref`` that now points elsewhere: compare what the two targets accept, here."""
        before, after = site.both("$ref")
        if before == after:
            return
        where = child(site.pointer, "$ref")
        if (before, after) in self.followed:  # a cycle through $ref: compared once already
            self.emit_keyword(site, "$ref", "reference_changed", Shape.UNKNOWN)
            return
        self.followed.add((before, after))
        if before is None or after is None:
            present = str(after if before is None else before)
            target = resolve_local(self.new_root if before is None else self.old_root, present)
            if target is None:
                self.emit_keyword(site, "$ref", "reference_changed", Shape.UNKNOWN)
                return
            old_target = True if before is None else target
            new_target = target if before is None else True
            self.node(old_target, new_target, where, site.polarity)
            return
        old_target = resolve_local(self.old_root, before)
        new_target = resolve_local(self.new_root, after)
        if old_target is None or new_target is None:
            self.emit_keyword(site, "$ref", "reference_changed", Shape.UNKNOWN)
            return
        self.node(old_target, new_target, where, site.polarity)

    def definitions(self, site: _Site) -> None:
        """``$defs``: compared where they are, with the polarity of their references."""
        old_defs: dict[str, Any] = site.old.get("$defs", {})
        new_defs: dict[str, Any] = site.new.get("$defs", {})
        for name in list(old_defs) + [name for name in new_defs if name not in old_defs]:
            if name in old_defs and name in new_defs:
                where = child(site.pointer, "$defs", name)
                self.node(old_defs[name], new_defs[name], where, None)
            else:
                self.emit_keyword(
                    site,
                    "$defs",
                    "definition_added" if name in new_defs else "definition_removed",
                    Shape.ANNOTATION,
                    below=(name,),
                    old=None,
                    new=None,
                    detail="a definition matters only where a $ref uses it",
                )

    def unhandled(self, site: _Site) -> None:
        """Any keyword this walk has no rule for that differs: a change no rule decides."""
        for keyword in sorted((set(site.old) | set(site.new)) - _HANDLED):
            before, after = site.both(keyword)
            if canonical_value(before) != canonical_value(after):
                self.emit_keyword(
                    site,
                    keyword,
                    "keyword_changed",
                    Shape.UNKNOWN,
                    detail=f"no rule for {keyword!r}",
                )


def diff_schemas(old: Any, new: Any) -> list[Change]:
    """Every change from schema ``old`` to schema ``new``, with its effects, in walk order."""
    walk = _Walk(old, new)
    for source in (old, new):
        for target, polarities in ref_polarities(source).items():
            walk.referenced.setdefault(target, set()).update(polarities)
    walk.node(old, new, "", 1)
    return walk.changes
