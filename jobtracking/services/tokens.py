"""API tokens: issued for a user (the key shown once, only its hash stored), marked as used,
revoked."""

import hashlib
import secrets
from datetime import datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from jobtracking.models import ApiToken


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def token_issue(*, user: AbstractBaseUser, expires_in: timedelta | None = None) -> str:
    """Create a token for `user`, valid for `expires_in` (None: until revoked), and return its
    key, which is stored nowhere."""
    key = secrets.token_urlsafe(32)
    expires_at = timezone.now() + expires_in if expires_in else None
    ApiToken.objects.create(
        user=user, key_hash=hash_key(key), prefix=key[:8], expires_at=expires_at
    )
    return key


def token_mark_used(token: ApiToken, now: datetime) -> None:
    token.last_used_at = now
    ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)


def tokens_revoke(*, users) -> int:
    """Delete every token of these users; returns how many."""
    count, _ = ApiToken.objects.filter(user__in=users).delete()
    return count
