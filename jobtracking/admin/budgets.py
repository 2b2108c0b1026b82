"""Usage budgets in the staff console: a client's pages a month, for every extractor or one,
with the month's usage and held jobs beside each. Every change is logged with who and why;
saving one releases at once the held jobs it now has room for (`services.budgets`)."""

from django import forms
from django.contrib import admin, messages
from django.contrib.admin.helpers import ActionForm
from django.contrib.admin.models import DELETION
from django.contrib.admin.views.main import ChangeList
from django.db.models import Count, Q
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from jobtracking import states
from jobtracking.admin.common import LoggedWithReason, reason_field, record
from jobtracking.models import UsageBudget
from jobtracking.services.budgets import budget_changed, budget_rooms


class BudgetActionForm(ActionForm):
    reason = forms.CharField(
        label="Reason (to remove):",
        required=False,
        widget=forms.TextInput(attrs={"size": 40, "placeholder": "e.g. contract ended"}),
    )


class BudgetChangeList(ChangeList):
    def get_results(self, request) -> None:
        """The page's budgets, each with its month's room (`room`): one statement for the
        page, not one a budget."""
        super().get_results(request)
        self.result_list = list(self.result_list)
        for room in budget_rooms(self.result_list, timezone.now()):
            room.budget.room = room


class UsageBudgetForm(forms.ModelForm):
    reason = reason_field("the budget is set or changed")

    class Meta:
        model = UsageBudget
        fields = ["client", "extractor", "pages", "threshold_percent", "when_used_up"]


@admin.register(UsageBudget)
class UsageBudgetAdmin(LoggedWithReason, admin.ModelAdmin):
    form = UsageBudgetForm
    list_display = [
        "client",
        "scope",
        "pages",
        "used_this_month",
        "held_jobs",
        "threshold_percent",
        "when_used_up",
    ]
    list_filter = ["when_used_up", "extractor"]
    list_select_related = ["client", "extractor"]
    search_fields = ["client__username"]
    autocomplete_fields = ["client"]
    actions = ["remove_budgets"]
    action_form = BudgetActionForm

    def get_changelist(self, request, **kwargs):
        return BudgetChangeList

    def get_queryset(self, request):
        held = Count("client__extraction_jobs", Q(client__extraction_jobs__status=states.HELD))
        return super().get_queryset(request).annotate(held=held)

    @admin.display(description="extractor", ordering="extractor__slug")
    def scope(self, budget: UsageBudget) -> str:
        return budget.extractor.slug if budget.extractor_id else "(every extractor)"

    @admin.display(description="used this month (in flight)")
    def used_this_month(self, budget: UsageBudget) -> str:
        room = getattr(budget, "room", None)  # None: removed since the page read it
        return f"{room.used} ({room.in_flight})" if room else "—"

    @admin.display(description="client's held jobs", ordering="held")
    def held_jobs(self, budget: UsageBudget):
        if not budget.held:
            return "0"
        changelist = reverse("admin:jobtracking_extractionjob_changelist")
        return format_html('<a href="{}?status={}">{}</a>', changelist, states.HELD, budget.held)

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        budget_changed(obj)

    # Removed only by the action below, which asks why (Django's delete page does not).
    def has_delete_permission(self, request, obj=None) -> bool:
        return False

    def has_remove_permission(self, request) -> bool:
        return request.user.has_perm("jobtracking.delete_usagebudget")

    @admin.action(description="Remove budgets (with a reason)", permissions=["remove"])
    def remove_budgets(self, request, queryset):
        reason = request.POST.get("reason", "").strip()
        if not reason:
            self.message_user(
                request,
                "Nothing removed: write why in the reason box (it goes in the admin log).",
                messages.ERROR,
            )
            return
        for budget in queryset.select_related("client", "extractor"):
            record(request, [budget], f"Removed: {budget}. Reason: {reason}", flag=DELETION)
            budget.delete()
            budget_changed(budget)
            self.message_user(request, f"Removed: {budget}. Its client's held jobs are released.")
