"""API tokens: who holds which (by prefix), when each was last used and when it expires; revoke
one, or every token of the selected tokens' users. Keys are never shown (only hashes are kept)."""

from django.contrib import admin

from jobtracking.admin.common import moment, record
from jobtracking.models import ApiToken
from jobtracking.services.tokens import tokens_revoke


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    list_display = ["prefix", "user", "created", "last_used", "expires"]
    list_filter = [("expires_at", admin.EmptyFieldListFilter)]
    search_fields = ["user__username", "=prefix"]
    list_select_related = ["user"]
    fields = ["prefix", "user", "created_at", "last_used_at", "expires_at"]
    readonly_fields = fields
    actions = ["revoke_all_of_their_users"]

    def has_add_permission(self, request) -> bool:
        return False  # issued by `manage.py create_api_token`, which shows the key once

    def has_change_permission(self, request, obj=None) -> bool:
        return False

    @admin.display(description="created", ordering="created_at")
    def created(self, token: ApiToken) -> str:
        return moment(token.created_at)

    @admin.display(description="last used", ordering="last_used_at")
    def last_used(self, token: ApiToken) -> str:
        return moment(token.last_used_at) if token.last_used_at else "never"

    @admin.display(description="expires", ordering="expires_at")
    def expires(self, token: ApiToken) -> str:
        return moment(token.expires_at) if token.expires_at else "when revoked"

    @admin.action(
        description="Revoke every token of the selected tokens' users", permissions=["delete"]
    )
    def revoke_all_of_their_users(self, request, queryset):
        users = {token.user for token in queryset}
        record(
            request,
            list(ApiToken.objects.filter(user__in=users)),
            "Revoked (every token of its user).",
        )
        count = tokens_revoke(users=users)
        names = ", ".join(sorted(user.get_username() for user in users))
        self.message_user(request, f"{count} token(s) revoked for {names}.")
