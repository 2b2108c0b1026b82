"""Every option of every command of the project says what it does in `manage.py help`."""

import argparse

import pytest
from django.core.management import get_commands, load_command_class

PROJECT_APPS = {"jobtracking", "extraction", "config"}


def project_commands() -> list[tuple[str, str]]:
    return sorted(
        (app, name) for name, app in get_commands().items() if app.split(".")[0] in PROJECT_APPS
    )


def test_project_commands_are_found():
    found = {name for _app, name in project_commands()}
    assert {"requeue_jobs", "cancel_jobs", "retry_webhooks", "run_sandbox_extractor"} <= found


@pytest.mark.parametrize(("app", "name"), project_commands())
def test_every_command_flag_has_help(app, name):
    parser = load_command_class(app, name).create_parser("manage.py", name)
    silent = [
        action.option_strings[0] if action.option_strings else action.dest
        for action in parser._actions
        if not (action.help or "").strip() and action.help is not argparse.SUPPRESS
    ]
    assert not silent, f"{name}: no help for {', '.join(silent)}"
