from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand, CommandError

from jobtracking.api.auth import token_issue
from jobtracking.models import ApiToken

CLIENTS_GROUP = "API clients"


class Command(BaseCommand):
    help = (
        "Issue an API token for USER and print it (it is stored only as a hash, so this is the "
        f"only time it is shown). With --create, make USER a service account in the "
        f"'{CLIENTS_GROUP}' group (view, create, cancel and requeue its own jobs)."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--create", action="store_true", help="Create the service account.")
        parser.add_argument(
            "--revoke-others", action="store_true", help="Delete USER's earlier tokens."
        )

    def handle(self, *args, username, create, revoke_others, **options):
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
        key = token_issue(user=user)
        self.stderr.write(f"New token for {username!r} (shown once):")
        self.stdout.write(key)
