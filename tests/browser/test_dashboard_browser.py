"""The dashboard in a real browser: it uses a wide screen's width, fits a phone without sideways
scrolling, and its charts' labels are inside the chart and readable in both themes."""

import uuid
from datetime import timedelta

from django.utils import timezone
from django_q.conf import Conf
from django_q.tasks import async_task

from jobtracking.infra.queue import enqueue_batch
from jobtracking.models import ServiceHeartbeat
from tests.browser.chromium import ARTIFACTS, MARKS
from tests.factories import ExtractionJobFactory, ExtractorFactory

pytestmark = MARKS
DASHBOARD = "/admin/dashboard/"


def busy_hour(monkeypatch):
    monkeypatch.setattr(Conf, "SYNC", False)  # tasks wait in the broker, as in production
    for delivery_id in range(3):  # left from before the delivery lane
        async_task("jobtracking.tasks.deliver_webhook", delivery_id)
    enqueue_batch([uuid.uuid4()])
    now = timezone.now()
    extractor = ExtractorFactory(slug="sandbox")
    for minutes in (1, 1, 2, 5, 30, 90, 300):
        ExtractionJobFactory(
            extractor=extractor,
            succeeded=True,
            created_at=now - timedelta(minutes=minutes + 1),
            completed_at=now - timedelta(minutes=minutes),
        )
    ExtractionJobFactory(extractor=extractor, failed=True, completed_at=now)
    ExtractionJobFactory(extractor=extractor)
    ExtractionJobFactory(extractor=extractor, processing=True)


def open_dashboard(page, url):
    page.goto(url)
    page.wait_for_selector("#per-hour svg.chart:visible")  # the wide drawing or the phone's
    # Stop the refresh: each check reads one rendering of the body, laid out (two frames on).
    page.evaluate("() => { for (let i = 1; i < 10000; i++) clearInterval(i); }")
    page.evaluate(
        "() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))"
    )


def column_lefts(page) -> set[int]:
    return set(
        page.evaluate(
            "() => [...document.querySelectorAll('#dashboard > section')]"
            ".map(s => Math.round(s.getBoundingClientRect().left))"
        )
    )


LABELS_OUTSIDE = """() => {
  const outside = [];
  for (const svg of document.querySelectorAll('#dashboard svg.chart')) {
    const box = svg.getBoundingClientRect();
    for (const text of svg.querySelectorAll('text')) {
      const r = text.getBoundingClientRect();
      if (r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5 || r.left < box.left - 0.5
          || r.right > box.right + 0.5) outside.push(svg.id + ': ' + text.textContent);
    }
  }
  return outside;
}"""


def test_dashboard_uses_the_width_and_fits_a_phone(live_server, staff_page, monkeypatch):
    busy_hour(monkeypatch)
    page = staff_page
    page.set_viewport_size({"width": 1366, "height": 900})
    open_dashboard(page, f"{live_server.url}{DASHBOARD}")
    assert len(column_lefts(page)) > 1
    assert "webhook deliveries\t3" in page.locator("#broker-kinds").inner_text()
    top_tick = page.locator("#throughput .y-tick").last
    assert top_tick.text_content() != "0"  # the busiest hour's total, at the very top
    assert page.evaluate(LABELS_OUTSIDE) == []
    page.screenshot(path=str(ARTIFACTS / "13-dashboard-wide.png"), full_page=True)

    page.set_viewport_size({"width": 390, "height": 844})
    open_dashboard(page, f"{live_server.url}{DASHBOARD}")
    assert len(column_lefts(page)) == 1
    assert page.evaluate(
        "() => document.documentElement.scrollWidth <= document.documentElement.clientWidth"
    )
    # Nor does any part scroll sideways on its own: the tables fit the phone too.
    assert (
        page.evaluate(
            "() => [...document.querySelectorAll('#dashboard > section')]"
            ".filter(s => s.scrollWidth > s.clientWidth)"
            ".map(s => s.querySelector('h2').textContent)"
        )
        == []
    )
    assert page.evaluate(LABELS_OUTSIDE) == []
    # Its charts' labels are drawn at a size a phone's reader can read.
    sizes = page.evaluate(LABEL_PIXELS)
    assert sizes and min(sizes) >= 11, sizes
    page.screenshot(path=str(ARTIFACTS / "14-dashboard-phone.png"), full_page=True)


# The rendered size, in CSS pixels, of each label of the charts shown.
LABEL_PIXELS = """() => [...document.querySelectorAll('#dashboard svg.chart')]
  .filter(svg => svg.getBoundingClientRect().width > 0)
  .flatMap(svg => [...svg.querySelectorAll('text')].map(
    t => t.getScreenCTM().a * parseFloat(getComputedStyle(t).fontSize)))"""


def rgb(colour: str) -> tuple[int, ...]:
    return tuple(int(part) for part in colour[colour.index("(") + 1 : -1].split(",")[:3])


def contrast(one: str, other: str) -> float:
    """WCAG's contrast ratio of two computed `rgb(…)` colours."""

    def luminance(colour):
        linear = [
            c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
            for c in (part / 255 for part in rgb(colour))
        ]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    light, dark = sorted((luminance(one), luminance(other)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


AXIS_AND_BACKGROUND = """() => [
  getComputedStyle(document.querySelector('#throughput .y-tick')).fill,
  getComputedStyle(document.querySelector('#rate .x-label')).fill,
  getComputedStyle(document.body).backgroundColor,
]"""


def test_dashboard_chart_labels_read_in_dark_mode(live_server, staff_page, monkeypatch):
    busy_hour(monkeypatch)
    page = staff_page
    url = f"{live_server.url}{DASHBOARD}"
    page.emulate_media(color_scheme="light")
    open_dashboard(page, url)
    y_tick, x_label, light_background = page.evaluate(AXIS_AND_BACKGROUND)
    assert contrast(y_tick, light_background) >= 4.5 and x_label == y_tick

    page.emulate_media(color_scheme="dark")  # the system's preference, admin theme "auto"
    open_dashboard(page, url)
    y_tick, x_label, background = page.evaluate(AXIS_AND_BACKGROUND)
    assert background != light_background  # the admin did turn dark
    assert contrast(y_tick, background) >= 4.5 and contrast(x_label, background) >= 4.5
    page.screenshot(path=str(ARTIFACTS / "15-dashboard-dark.png"), full_page=True)

    page.emulate_media(color_scheme="light")  # the admin's own toggle, on a light system
    page.evaluate("() => localStorage.setItem('theme', 'dark')")
    open_dashboard(page, url)
    assert page.evaluate("() => document.documentElement.dataset.theme") == "dark"
    y_tick, x_label, background = page.evaluate(AXIS_AND_BACKGROUND)
    assert background != light_background
    assert contrast(y_tick, background) >= 4.5 and contrast(x_label, background) >= 4.5


ALIVE_AND_BACKGROUND = """() => [
  getComputedStyle(document.querySelector('#dashboard .alive')).color,
  getComputedStyle(document.body).backgroundColor,
]"""


def test_alive_reads_in_both_themes(live_server, staff_page):
    ServiceHeartbeat.objects.create(kind="dispatcher", name="d-1", beat_at=timezone.now())
    page = staff_page
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        open_dashboard(page, f"{live_server.url}{DASHBOARD}")
        alive, background = page.evaluate(ALIVE_AND_BACKGROUND)
        assert contrast(alive, background) >= 4.5, (scheme, alive, background)
