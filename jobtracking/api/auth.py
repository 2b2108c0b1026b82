"""Token authentication with hashed tokens: `Authorization: Token <key>` (or `Bearer <key>`)."""

import hashlib
import logging
import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.cache import cache
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header

from jobtracking.models import ApiToken
from jobtracking.recent import Recent

logger = logging.getLogger(__name__)

KEYWORDS = (b"token", b"bearer")
LAST_USED_RESOLUTION = timedelta(minutes=5)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def token_issue(*, user: AbstractBaseUser) -> str:
    """Create a token for `user` and return its key, which is stored nowhere."""
    key = secrets.token_urlsafe(32)
    ApiToken.objects.create(user=user, key_hash=hash_key(key), prefix=key[:8])
    return key


def _failures_key(request) -> str:
    return f"api-auth-failures:{request.META.get('REMOTE_ADDR', '')}"


def _refuse(request, reason: str) -> exceptions.AuthenticationFailed:
    """Count a failed authentication against the client's address and log it (never the
    token)."""
    key = _failures_key(request)
    cache.add(key, 0, settings.API_AUTH_FAILURE_WINDOW_SECONDS)
    try:
        failures = cache.incr(key)
    except ValueError:  # expired between add and incr
        failures = 1
    logger.warning(
        "API authentication failed from %s (%s; %d in the window)",
        request.META.get("REMOTE_ADDR", "?"),
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
    the window gets 429 for any token, right or wrong, until the window ends."""

    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() not in KEYWORDS:
            return None
        failures = cache.get(_failures_key(request), 0)
        if failures >= settings.API_AUTH_FAILURE_LIMIT:
            raise exceptions.Throttled(
                wait=settings.API_AUTH_FAILURE_WINDOW_SECONDS,
                detail="Too many failed authentications from this address.",
            )
        if len(parts) != 2:
            raise _refuse(request, "Malformed Authorization header.")
        try:
            key = parts[1].decode()
        except UnicodeDecodeError:
            raise _refuse(request, "Malformed token.") from None
        digest = hash_key(key)
        token = RECENT_TOKENS.get(digest, lambda: _load_token(digest))
        if token is None or not token.user.is_active:
            raise _refuse(request, "Invalid token.")
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
            token.last_used_at = now
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token

    def authenticate_header(self, request) -> str:
        return "Token"
