"""A bulk create's items, validated quickly. The rules are the create serializer's own: when
the module loads, each of its fields gets a reader (`plan`): plain text and integers are read
without DRF's per-field machinery, which cost several times the rules themselves; every other
field meets its own `run_validation`. Then come the serializer's `validate_<field>` hooks, its
validators and its `validate()`, as DRF runs them. An item the quick path does not plainly
accept goes through the serializer, whose messages the client gets; the quick path never
accepts what the serializer refuses, nor returns other data
(`tests/jobtracking/api/test_bulk_validation.py` holds both to that)."""

import re
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import URLValidator
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.fields import empty

from extraction.models import Extractor
from jobtracking.api.serializers import ExtractionJobCreateSerializer

# A URL as its scheme and host, and a path of printable ASCII (so without whitespace).
URL_PARTS = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^/?#]*)(/[!-~]*)\Z")
MAX_URL_HEADS = 1000


class NotPlain(Exception):
    """The item needs the serializer (to be refused with its messages, or to be sure)."""


def _reads_as(field: serializers.Field, base: type[serializers.Field]) -> bool:
    """Whether `field` reads its input exactly as `base` does (a subclass that only adds
    validators, as URLField and RegexField do)."""
    return isinstance(field, base) and all(
        getattr(type(field), name) is getattr(base, name)
        for name in ("run_validation", "to_internal_value", "validate_empty_values")
    )


def plan(serializer_class: type[serializers.Serializer]) -> dict[str, str]:
    """Each writable field's reader: "text", "integer" or "field" (its own run_validation)."""
    readers = {}
    for name, field in serializer_class().fields.items():
        if field.read_only:
            continue
        if _reads_as(field, serializers.CharField):
            readers[name] = "text"
        elif _reads_as(field, serializers.IntegerField):
            readers[name] = "integer"
        else:
            readers[name] = "field"
    return readers


PLAN = plan(ExtractionJobCreateSerializer)


class BulkItemValidator:
    """Validates one bulk request's items with one create serializer, whose context names the
    extractors the request names (loaded at once) and remembers the hosts approved (a batch's
    URLs tend to share one)."""

    def __init__(self, extractors: dict[str, Extractor]) -> None:
        context = {"extractors": extractors, "approved_hosts": {}}
        self.serializer = serializer = ExtractionJobCreateSerializer(context=context)
        read = {"text": self._text, "integer": self._integer, "field": self._field}
        self.steps: list[tuple[str, serializers.Field, Callable, Callable | None]] = [
            (
                name,
                serializer.fields[name],
                read[kind],
                getattr(serializer, f"validate_{name}", None),
            )
            for name, kind in PLAN.items()
        ]
        self.known = frozenset(PLAN)
        self.url_heads: set[str] = set()  # "scheme://host" whose URLs the validator accepts

    def validated(self, item: Any) -> dict[str, Any]:
        """The item's validated data, or DRF's ValidationError."""
        quick = self.quick(item)
        return self.serializer.run_validation(item) if quick is None else quick

    def quick(self, item: Any) -> dict[str, Any] | None:
        """The validated data of a plainly valid item; None for the serializer to judge."""
        try:
            return self._plainly_valid(item)
        except (NotPlain, ValidationError, DjangoValidationError):
            return None

    def _plainly_valid(self, item: Any) -> dict[str, Any]:
        if type(item) is not dict or not item.keys() <= self.known:
            raise NotPlain  # the serializer names unknown fields
        data: dict[str, Any] = {}
        for name, field, read, hook in self.steps:
            if name in item:
                value = read(field, item[name])
            elif field.required:
                raise NotPlain  # the serializer names it
            elif field.default is not empty:
                value = field.get_default()
            else:
                continue
            if hook is not None:
                value = hook(value)
            self.serializer.set_value(data, field.source_attrs, value)
        if self.serializer.validators:  # (DRF's call gathers read-only defaults first)
            self.serializer.run_validators(data)
        return self.serializer.validate(data)

    def _field(self, field: serializers.Field, value: Any) -> Any:
        return field.run_validation(value)

    def _text(self, field: serializers.CharField, value: Any) -> str:
        """A string DRF's CharField would keep as it is (nothing to trim), by its validators."""
        if type(value) is not str or (field.trim_whitespace and value != value.strip()):
            raise NotPlain
        if not value:
            if not field.allow_blank:
                raise NotPlain
            return value
        for validator in field.validators:
            if type(validator) is URLValidator:
                self._url(validator, value)
            else:
                validator(value)
        return value

    def _url(self, validator: URLValidator, value: str) -> None:
        """`validator(value)`, judged once per scheme and host where the path is printable
        ASCII: such a path cannot change the verdict (the validator's pattern ends in
        `[/?#][^\\s]*`, and its other checks read only the scheme and the host), so
        `scheme://host/` stands for every URL of that host. Other URLs meet the validator."""
        parts = URL_PARTS.match(value)
        if parts is None or len(value) > validator.max_length:
            validator(value)
            return
        head = parts[1]
        if head not in self.url_heads:
            validator(head + "/")
            if len(self.url_heads) >= MAX_URL_HEADS:
                self.url_heads.clear()
            self.url_heads.add(head)

    def _integer(self, field: serializers.IntegerField, value: Any) -> int | None:
        if value is None:
            if not field.allow_null:
                raise NotPlain
            return None
        if type(value) is not int:
            raise NotPlain
        for validator in field.validators:
            validator(value)
        return value
