import csv
from datetime import datetime

from django.core.management.base import BaseCommand, CommandError

from jobtracking.admin.usage import month_days, usage_csv
from jobtracking.usage_selectors import GROUPS, parse_groups, usage_summary


def month(value: str):
    try:
        return datetime.strptime(value, "%Y-%m").date()
    except ValueError:
        raise CommandError(f"--month {value!r}: give a month as YYYY-MM, e.g. 2026-11.") from None


class Command(BaseCommand):
    help = (
        "Every client's usage over one month (UTC days): billable pages, billed attempts "
        "(jobs) and estimated cost, by client, extractor and model (or --group-by)."
    )

    def add_arguments(self, parser):
        parser.add_argument("--month", required=True, type=month, help="YYYY-MM, e.g. 2026-11")
        parser.add_argument(
            "--format",
            choices=["table", "csv"],
            default="table",
            help="table (aligned columns, a total) or csv (for a spreadsheet); default table",
        )
        parser.add_argument(
            "--group-by",
            default="client,extractor,model",
            help=f"Comma-separated, from: {', '.join(GROUPS)} (default client,extractor,model).",
        )

    def handle(self, *args, **options):
        try:
            keys = parse_groups(options["group_by"])
        except ValueError as error:
            raise CommandError(f"--group-by: {error}") from None
        start, end = month_days(options["month"])
        lines = usage_summary(client=None, start=start, end=end, group_by=keys)
        rows = list(usage_csv(lines, keys))
        if options["format"] == "csv":
            csv.writer(self.stdout, lineterminator="\n").writerows(rows)
            return
        cells = [["—" if value in ("", None) else str(value) for value in row] for row in rows]
        widths = [max(len(row[i]) for row in cells) for i in range(len(rows[0]))]
        for row in cells:
            self.stdout.write(
                "  ".join(
                    v.rjust(w) if v[:1].isdigit() else v.ljust(w)
                    for v, w in zip(row, widths, strict=True)
                ).rstrip()
            )
        total = sum(line.pages for line in lines)
        saved = sum(line.pages_saved for line in lines)
        self.stdout.write(
            f"{len(lines)} line(s), {total} page(s), {saved} saved, {start} to {end}."
        )
