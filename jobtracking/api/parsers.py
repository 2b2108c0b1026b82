"""The bodies the API reads (JSON, multipart, forms), and what it says about one it does not."""

import io
import json

from rest_framework import parsers
from rest_framework.exceptions import ParseError, UnsupportedMediaType

JSON = "application/json"
SEND_JSON = f"send JSON with the header `Content-Type: {JSON}`"


class SafeJSONParser(parsers.JSONParser):
    """JSON whose nesting passes Python's recursion limit is a 400, not a crash."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply.") from None


class JsonSentAsFormError(UnsupportedMediaType):
    pass


class FormParser(parsers.FormParser):
    """Form fields, but not JSON text: `curl -d '{"file_id": …}'` without a Content-Type sends
    JSON as a form, which would read as one unknown field named by the whole text."""

    def parse(self, stream, media_type=None, parser_context=None):
        body = stream.read()
        if is_json_text(body):
            raise JsonSentAsFormError(
                media_type,
                detail=f"The body is JSON but was sent as {media_type} (what `curl -d` sends "
                f"unless told otherwise): {SEND_JSON}.",
            )
        return super().parse(io.BytesIO(body), media_type, parser_context)


def is_json_text(body: bytes) -> bool:
    """Whether the body is a JSON object or array (a form's fields never start with a bracket)."""
    if body.lstrip()[:1] not in (b"{", b"["):
        return False
    try:
        json.loads(body)
    except RecursionError:
        return True  # brackets nested too deeply to parse are no form either
    except ValueError:
        return False
    return True


def unsupported_media_type_detail(media_type: str, readable: list[str]) -> str:
    """What a 415 for a body of `media_type` says, given the types the endpoint reads."""
    given = f'"{media_type}" bodies are not read here' if media_type else "No Content-Type given"
    others = [name for name in readable if name != JSON]
    if JSON not in readable:
        return f"{given}: send one of {', '.join(readable)}."
    if others:
        return f"{given}: {SEND_JSON} (or use {' or '.join(others)})."
    return f"{given}: {SEND_JSON}."
