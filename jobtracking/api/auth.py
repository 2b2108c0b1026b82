"""Token authentication with hashed tokens: `Authorization: Token <key>` (or `Bearer <key>`)."""

import hashlib
import secrets
from datetime import timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone
from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header

from jobtracking.models import ApiToken

KEYWORDS = (b"token", b"bearer")
LAST_USED_RESOLUTION = timedelta(minutes=5)


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def token_issue(*, user: AbstractBaseUser) -> str:
    """Create a token for `user` and return its key, which is stored nowhere."""
    key = secrets.token_urlsafe(32)
    ApiToken.objects.create(user=user, key_hash=hash_key(key), prefix=key[:8])
    return key


class HashedTokenAuthentication(BaseAuthentication):
    def authenticate(self, request):
        parts = get_authorization_header(request).split()
        if not parts or parts[0].lower() not in KEYWORDS:
            return None
        if len(parts) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header.")
        try:
            key = parts[1].decode()
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Malformed token.") from None
        token = ApiToken.objects.select_related("user").filter(key_hash=hash_key(key)).first()
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid token.")
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_RESOLUTION:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token

    def authenticate_header(self, request) -> str:
        return "Token"
