"""Validation messages that read as English, in one place. DRF's and Django's defaults miscount
("Ensure this field has at least 1 elements."), speak Python to JSON clients ("Expected a
dictionary of items but got type "list".") or leave out what would be right ("Select a valid
choice."). Input serializers (`StrictSerializer`) and filter sets (`PlainFilterSet`) pass each of
their fields through here; a field's own rule (a pattern, a priority's names) stays with it."""

from django import forms
from django.core import validators
from rest_framework import serializers

# The body itself, when it is not an object (DRF formats in a Python type name: left out).
BODY_NOT_AN_OBJECT = "The body must be a JSON object of this request's fields."


def counted(count: int, noun: str) -> str:
    """'1 job', '2 jobs'."""
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def _length_limits(field: serializers.Field, noun: str, *, send: bool) -> None:
    """Rewrites the messages of the limit validators DRF built when it made the field; `send`:
    the field counts what the client sends (a list's items), not characters of a value."""
    texts = {
        validators.MinLengthValidator: lambda n: (
            f"Send at least {counted(n, noun)}."
            if send
            else f"Must be at least {counted(n, noun)}."
        ),
        validators.MaxLengthValidator: lambda n: (
            f"At most {counted(n, noun)} a request: send the rest in another."
            if send
            else f"Must be at most {counted(n, noun)}."
        ),
        validators.MinValueValidator: lambda n: f"Must be at least {n}.",
        validators.MaxValueValidator: lambda n: f"Must be at most {n}.",
    }
    field.validators = [
        type(check)(check.limit_value, message=texts[type(check)](check.limit_value))
        if type(check) in texts
        else check
        for check in field.validators
    ]


def plain_field(field: serializers.Field, *, item: str = "element") -> None:
    """Rewrites the messages of `field` (a serializer's own copy of it) in place; `item` names
    what a list holds."""
    messages = field.error_messages
    if isinstance(field, serializers.ListField):
        messages["not_a_list"] = f"Must be a JSON array of {item}s."
        _length_limits(field, item, send=True)
        plain_field(field.child)
        return
    if "not_a_dict" in messages:  # DictField and its kind
        messages["not_a_dict"] = "Must be a JSON object."
        messages["null"] = "Must be a JSON object, not null."
    elif isinstance(field, serializers.FileField):
        messages["invalid"] = (
            "Must be a file, sent in a multipart/form-data body (JSON cannot carry one)."
        )
    elif isinstance(field, serializers.BooleanField):
        messages["invalid"] = "Must be true or false."
    elif isinstance(field, serializers.IntegerField):
        messages["invalid"] = "Must be a whole number."
    elif type(field) is serializers.CharField:  # not its kinds, whose "invalid" is their rule
        messages["invalid"] = "Must be a string."
    _length_limits(field, "character", send=False)


def plain_choices(field: forms.Field) -> None:
    """A query parameter's choice field names its choices when it refuses a value."""
    if isinstance(field, forms.ChoiceField):
        # (Django %-formats the message: a % in a name would be read as a placeholder.)
        names = ", ".join(str(value) for value, _ in field.choices if value != "")
        names = names.replace("%", "%%")
        field.error_messages["invalid_choice"] = f"Unknown value '%(value)s'; use {names}."
