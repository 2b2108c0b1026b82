from rest_framework.permissions import BasePermission

# Action → the permission it needs, on top of being authenticated.
JOB_ACTIONS = {
    "list": "jobtracking.view_extractionjob",
    "retrieve": "jobtracking.view_extractionjob",
    "history": "jobtracking.view_extractionjob",
    "result": "jobtracking.view_extractionjob",
    "create": "jobtracking.add_extractionjob",
    "bulk": "jobtracking.add_extractionjob",
    "cancel": "jobtracking.cancel_extractionjob",
    "requeue": "jobtracking.requeue_extractionjob",
}

# A batch's actions need what the same action on its jobs needs.
BATCH_ACTIONS = {
    "list": JOB_ACTIONS["list"],
    "retrieve": JOB_ACTIONS["retrieve"],
    "create": JOB_ACTIONS["bulk"],
    "jobs": JOB_ACTIONS["bulk"],
    "close": JOB_ACTIONS["bulk"],
    "cancel": JOB_ACTIONS["cancel"],
    "requeue": JOB_ACTIONS["requeue"],
}


class ActionPermission(BasePermission):
    """Model permissions per viewset action (or per HTTP method on plain views); the view names
    them in `action_permissions`."""

    def has_permission(self, request, view) -> bool:
        if not (request.user and request.user.is_authenticated):
            return False
        needed = view.action_permissions.get(getattr(view, "action", None) or request.method)
        return needed is None or request.user.has_perm(needed)
