"""JSON creates validated quickly: a single create's body or a bulk create's items. Most are
plainly valid: for those, each field's own rules (the create serializer's validators, limits and
`validate_*` methods) run without DRF's per-field machinery, which cost four times the rules
themselves. A body the quick path does not plainly accept (a multipart upload among them) goes
through the serializer, whose messages the client gets; the quick path never accepts what the
serializer refuses, nor returns other data (`tests/jobtracking/api/test_quick_create.py` holds
both to that)."""

import re
import threading
from collections.abc import Callable
from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import URLValidator
from rest_framework.exceptions import ValidationError
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from extraction.models import Extractor
from jobtracking.api.serializers import (
    ExtractionJobCreateSerializer,
    create_checker,
    recent_extractor,
)

TEXT_FIELDS = ("file_id", "file_name", "content_type", "file_sha256", "source_url")
JSON_FIELDS = ("options", "metadata")
SURROGATE = re.compile("[\ud800-\udfff]")
QUICK_FIELDS = frozenset({"extractor", "file_size", "priority", *TEXT_FIELDS, *JSON_FIELDS})
# A URL as its scheme and host, and a path of printable ASCII (so without whitespace).
URL_PARTS = re.compile(r"([a-zA-Z][a-zA-Z0-9+.-]*://[^/?#]*)(/[!-~]*)\Z")
MAX_URL_HEADS = 1000


class NotPlain(Exception):
    """The item needs the serializer (to be refused with its messages, or to be sure)."""


class QuickCreateValidator:
    def __init__(
        self,
        serializer: ExtractionJobCreateSerializer,
        find_extractor: Callable[[str], Extractor | None],
    ) -> None:
        self.serializer = serializer
        self.fields = serializer.fields
        self.find_extractor = find_extractor
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
        if type(item) is not dict or not item.keys() <= QUICK_FIELDS:
            raise NotPlain
        slug = item.get("extractor")
        if type(slug) is not str or not slug or "\x00" in slug:
            raise NotPlain  # for the serializer's message (no null character to the database)
        extractor = self.find_extractor(slug)
        if extractor is None:
            raise NotPlain
        data = {"extractor": self.serializer.validate_extractor(extractor)}
        for name in TEXT_FIELDS:
            if name in item:
                data[name] = self._text(name, item[name])
            elif self.fields[name].required:
                raise NotPlain  # (file_id) the serializer names it
        if not data.get("source_url"):
            raise NotPlain  # a JSON create's one source
        self.serializer.validate_source_url(data["source_url"])
        if "file_size" in item:
            data["file_size"] = self._size(item["file_size"])
        for name in JSON_FIELDS:
            field = self.fields[name]
            if name in item:
                data[name] = field.to_internal_value(item[name])
            else:
                data[name] = field.get_default()
        if "priority" in item:
            data["priority"] = self.fields["priority"].to_internal_value(item["priority"])
        return data

    def _text(self, name: str, value: Any) -> str:
        """A string DRF's CharField would keep as it is (nothing to trim), by its validators."""
        field = self.fields[name]
        if type(value) is not str or value != value.strip():
            raise NotPlain
        if not value:
            if not field.allow_blank:
                raise NotPlain
            return value
        for validator in field.validators:
            if type(validator) is ProhibitSurrogateCharactersValidator:
                # DRF's check, by a regular expression rather than a Python loop per character.
                if SURROGATE.search(value):
                    raise NotPlain
            elif type(validator) is URLValidator:
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

    def _size(self, value: Any) -> int | None:
        field = self.fields["file_size"]
        if value is None:
            return None
        if type(value) is not int or not field.min_value <= value <= field.max_value:
            raise NotPlain
        return value


def batch_validator(extractors: dict[str, Extractor]) -> QuickCreateValidator:
    """For one bulk request's items: `extractors` are the ones it names, loaded at once, and
    each host is resolved and checked once (a batch's URLs tend to share one)."""
    context = {"extractors": extractors, "approved_hosts": {}}
    return QuickCreateValidator(ExtractionJobCreateSerializer(context=context), extractors.get)


_validators = threading.local()


def single_validator() -> QuickCreateValidator:
    """This thread's validator of single creates, reused like its serializer (`create_checker`);
    extractors are looked up as the serializer looks them up."""
    validator = getattr(_validators, "single", None)
    if validator is None:
        validator = _validators.single = QuickCreateValidator(create_checker(), recent_extractor)
    return validator
