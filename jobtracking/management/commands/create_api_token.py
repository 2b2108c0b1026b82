from datetime import timedelta

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError

from jobtracking.models import ApiToken
from jobtracking.services.tokens import token_issue

CLIENTS_GROUP = "API clients"


class Command(BaseCommand):
    help = (
        "Issue an API token for USER and print it (it is stored only as a hash, so this is the "
        f"only time it is shown). With --create, make USER a service account in the "
        f"'{CLIENTS_GROUP}' group (view, create, cancel and requeue its own jobs)."
    )

    def add_arguments(self, parser):
        parser.add_argument("username", help="The user the token acts as.")
        parser.add_argument("--create", action="store_true", help="Create the service account.")
        parser.add_argument(
            "--revoke-others", action="store_true", help="Delete USER's earlier tokens."
        )
        parser.add_argument(
            "--expires-days",
            type=int,
            default=None,
            help="Refuse the token after this many days (default: valid until revoked).",
        )

    def handle(self, *args, username, create, revoke_others, expires_days, **options):
        if expires_days is not None and expires_days < 1:
            raise CommandError("--expires-days takes a whole number of days, at least 1.")
        User = get_user_model()
        user = User.objects.filter(username=username).first()
        if user is None and not create:
            raise CommandError(f"No user {username!r}; pass --create to make a service account.")
        if user is None:
            user = User.objects.create_user(username=username)
            user.set_unusable_password()
            user.save()
            user.groups.add(Group.objects.get(name=CLIENTS_GROUP))
            self.stderr.write(f"Created service account {username!r} in {CLIENTS_GROUP!r}.")
        if revoke_others:
            revoked, _ = ApiToken.objects.filter(user=user).delete()
            self.stderr.write(f"Revoked {revoked} earlier token(s).")
        expires_in = timedelta(days=expires_days) if expires_days else None
        key = token_issue(user=user, expires_in=expires_in)
        until = f", expires in {expires_days} day(s)" if expires_days else ""
        self.stderr.write(f"New token for {username!r}{until} (shown once):")
        self.stdout.write(key)
