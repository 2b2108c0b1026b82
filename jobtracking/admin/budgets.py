"""Usage budgets in the staff console: a client's pages a month, for every extractor or one,
with the month's usage and held jobs beside each. Every change is logged with who and why;
saving one releases at once the held jobs it now has room for (`services.budgets`)."""

from django import forms
from django.contrib import admin
from django.db.models import Count, Q
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from jobtracking import states
from jobtracking.admin.common import LoggedWithReason, reason_field
from jobtracking.models import UsageBudget
from jobtracking.services.budgets import budget_changed, budget_room


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

    def get_queryset(self, request):
        held = Count("client__extraction_jobs", Q(client__extraction_jobs__status=states.HELD))
        return super().get_queryset(request).annotate(held=held)

    @admin.display(description="extractor", ordering="extractor__slug")
    def scope(self, budget: UsageBudget) -> str:
        return budget.extractor.slug if budget.extractor_id else "(every extractor)"

    @admin.display(description="used this month (in flight)")
    def used_this_month(self, budget: UsageBudget) -> str:
        room = budget_room(budget, timezone.now())
        return f"{room.used} ({room.in_flight})"

    @admin.display(description="client's held jobs", ordering="held")
    def held_jobs(self, budget: UsageBudget):
        if not budget.held:
            return "0"
        changelist = reverse("admin:jobtracking_extractionjob_changelist")
        return format_html('<a href="{}?status={}">{}</a>', changelist, states.HELD, budget.held)

    def save_model(self, request, obj, form, change) -> None:
        super().save_model(request, obj, form, change)
        budget_changed(obj)

    def delete_model(self, request, obj) -> None:
        super().delete_model(request, obj)
        budget_changed(obj)

    def delete_queryset(self, request, queryset) -> None:
        budgets = list(queryset)
        super().delete_queryset(request, queryset)
        for budget in budgets:
            budget_changed(budget)
