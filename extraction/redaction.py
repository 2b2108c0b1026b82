"""Scrubbing what extractors say before anything of it is kept.

An extractor may echo credentials: its error page quotes the `Authorization` header, a proxy
repeats the subscription key. Whatever an extractor answers becomes job errors, audit reasons,
events, webhook bodies, logs and admin pages, so the client scrubs every answer once, as it
arrives: the configured key itself wherever it appears (bodies and the headers we keep), and any
value that looks like a credential in the error texts.
"""

import re

REDACTED = "[redacted]"
CREDENTIALS = (
    # "Bearer <token>", "Basic <base64>", "Token <key>"
    re.compile(r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=-]{6,}"),
    # "Authorization: …", "Ocp-Apim-Subscription-Key=…", "api_key": "…", "x-api-key …"
    re.compile(
        r"(?i)\b(authorization|ocp-apim-subscription-key|subscription[-_]?key|x-api-key|"
        r"api[-_]?key)([\"']?\s*[:=]?\s*[\"']?)(?!\[redacted\])[^\s\"',;}]{6,}"
    ),
)


def redact_bytes(body: bytes, key: str) -> bytes:
    if key and key.encode() in body:
        return body.replace(key.encode(), REDACTED.encode())
    return body


def redact_text(text: str, key: str = "") -> str:
    """The configured key and anything that looks like a credential, replaced."""
    if key:
        text = text.replace(key, REDACTED)
    for pattern in CREDENTIALS:
        text = pattern.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    return text
