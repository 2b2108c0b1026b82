"""Token authentication with hashed tokens: `Authorization: Token <key>` (or `Bearer <key>`)."""

import ipaddress
import logging
from datetime import timedelta

from django.conf import settings
from django.core.cache import cache
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header

from jobtracking.infra.recent import Recent
from jobtracking.models import ApiToken
from jobtracking.services.tokens import hash_key, token_mark_used

logger = logging.getLogger(__name__)

KEYWORDS = (b"token", b"bearer")
LAST_USED_RESOLUTION = timedelta(minutes=5)


def client_address(request) -> str:
    """The client's address. Behind `API_TRUSTED_PROXY_COUNT` proxies, REMOTE_ADDR is the last
    proxy's for every client: then it is the entry that many places from the right of
    X-Forwarded-For (each proxy appends the address it was called from; entries further left
    are whatever the client sent), as django-axes counts. REMOTE_ADDR when the header is short
    or that entry is not an address (a request that bypassed a proxy)."""
    remote = request.META.get("REMOTE_ADDR", "")
    count = settings.API_TRUSTED_PROXY_COUNT
    if count <= 0:
        return remote
    forwarded = [part.strip() for part in request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")]
    if len(forwarded) < count:
        return remote
    try:
        return str(ipaddress.ip_address(forwarded[-count]))
    except ValueError:
        return remote


def _failures_key(address: str) -> str:
    return f"api-auth-failures:{address}"


def _refuse(request, reason: str) -> exceptions.APIException:
    """A failed authentication: counted against the client's address and logged (never the
    token), or, past `API_AUTH_FAILURE_LIMIT` in the window, 429 until the window ends."""
    address = client_address(request)
    key = _failures_key(address)
    if cache.get(key, 0) >= settings.API_AUTH_FAILURE_LIMIT:
        return exceptions.Throttled(
            wait=settings.API_AUTH_FAILURE_WINDOW_SECONDS,
            detail="Too many failed authentications from this address.",
        )
    cache.add(key, 0, settings.API_AUTH_FAILURE_WINDOW_SECONDS)
    try:
        failures = cache.incr(key)
    except ValueError:  # expired between add and incr
        failures = 1
    logger.warning(
        "API authentication failed from %s (%s; %d in the window)",
        address or "?",
        reason,
        failures,
    )
    return exceptions.AuthenticationFailed(reason)


# Tokens with their user, whose permission caches then serve the following requests too.
RECENT_TOKENS = Recent()


def _load_token(digest: str) -> ApiToken | None:
    token = ApiToken.objects.select_related("user").filter(key_hash=digest).first()
    if token is not None:
        token.user.get_all_permissions()  # fills the user's permission caches once
    return token


class HashedTokenAuthentication(BaseAuthentication):
    """Also the brute-force brake: an address with `API_AUTH_FAILURE_LIMIT` failed attempts in
    the window gets 429 for its further wrong tokens until the window ends. A right token is
    always accepted: behind a proxy many clients share an address, and one of them guessing
    must not lock the others out."""

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() not in KEYWORDS:
            return None
        if len(parts) != 2:
            raise _refuse(request, "Malformed Authorization header.")
        try:
            key = parts[1].decode()
        except UnicodeDecodeError:
            raise _refuse(request, "Malformed token.") from None
        digest = hash_key(key)
        token = RECENT_TOKENS.get(digest, lambda: _load_token(digest))
        now = timezone.now()
        if token is None or not token.user.is_active:
            raise _refuse(request, "Invalid token.")
        if token.expires_at is not None and token.expires_at <= now:
            raise _refuse(request, "The token has expired: ask for a new one.")
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
            token_mark_used(token, now)
        return token.user, token

    def authenticate_header(self, request) -> str:
        return "Token"
