"""A client of the jobs API, as docs/api.md shows it: create a job (from a URL or a file), wait
for it with backoff, fetch its result, tail the event feed from now, and verify a webhook. Only
`requests` and `standardwebhooks` are needed (tests/jobtracking/api/test_client_example.py runs
it against a live server). With `make run` going: `KEY=<token> .venv/bin/python
docs/examples/client.py`."""

import os
import random
import time

import requests
from standardwebhooks import Webhook

FINISHED = {"succeeded", "failed", "timed_out", "cancelled"}


def get(url: str, token: str, **params) -> dict:
    """GET with the token; a 429 (throttled) waits the Retry-After it gives, then tries again."""
    while True:
        response = requests.get(
            url, params=params, headers={"Authorization": f"Token {token}"}, timeout=30
        )
        if response.status_code != 429:
            response.raise_for_status()
            return response.json()
        time.sleep(float(response.headers.get("Retry-After", "1")))


def created(response: requests.Response) -> dict:
    if response.status_code >= 400:
        problem = response.json()  # application/problem+json: code, detail, errors
        raise RuntimeError(f"{problem['code']}: {problem['detail']} {problem.get('errors', '')}")
    return response.json()


def create_from_url(base_url: str, token: str, source_url: str, *, extractor: str, file_id: str):
    """A job whose file the extractor fetches from `source_url` (a public address, or the
    sandbox's samples under `make run`)."""
    body = {"extractor": extractor, "file_id": file_id, "source_url": source_url}
    response = requests.post(
        f"{base_url}/api/v1/jobs/",
        headers={"Authorization": f"Token {token}"},
        json=body,
        timeout=30,
    )
    return created(response)


def create_from_file(base_url: str, token: str, path: str, *, extractor: str, file_id: str):
    """POST the file as multipart; the Idempotency-Key makes a retried POST safe."""
    with open(path, "rb") as upload:
        response = requests.post(
            f"{base_url}/api/v1/jobs/",
            headers={"Authorization": f"Token {token}", "Idempotency-Key": f"upload-{file_id}"},
            data={"extractor": extractor, "file_id": file_id},
            files={"file": upload},
            timeout=30,
        )
    return created(response)


def wait_for(job_url: str, token: str, *, timeout: float = 600, first_wait: float = 1.0) -> dict:
    """Poll the job until it is finished: waits double up to 30 s, with jitter."""
    deadline = time.monotonic() + timeout
    wait = first_wait
    while True:
        job = get(job_url, token)
        if job["status"] in FINISHED:
            return job
        if time.monotonic() + wait > deadline:
            raise TimeoutError(f"job {job['id']} still {job['status']} after {timeout} s")
        time.sleep(wait * random.uniform(0.8, 1.2))
        wait = min(wait * 2, 30.0)


def fetch_result(job: dict, token: str) -> dict:
    """A succeeded job's result; `payload` is what the extractor returned (the sandbox's:
    `pages`, each with its `text`, and `key_values`)."""
    return get(job["links"]["result"], token)


def tail_events(base_url: str, token: str, handle, *, first_wait=1.0, max_wait=30.0, stop=None):
    """Hand `handle` every event published from now on, oldest first, until `stop()` is true.
    `events/latest/` says where the feed is now; then `after=<the last id handled>` is polled
    at once while events come, and with waits doubling up to `max_wait` while none do."""
    after = get(f"{base_url}/api/v1/events/latest/", token)["after"]
    wait = first_wait
    while not (stop and stop()):
        events = get(f"{base_url}/api/v1/events/", token, after=after)["results"]
        for event in events:
            handle(event)
            after = event["id"]  # keep it (a file, a table) to resume here after a restart
        if events:
            wait = first_wait
            continue
        time.sleep(wait * random.uniform(0.8, 1.2))
        wait = min(wait * 2, max_wait)


def verify_webhook(secret: str, body: bytes, headers: dict[str, str]) -> dict:
    """The event, if the signature and timestamp are right; raises WebhookVerificationError
    otherwise (answer 400 then, and 2xx only after the event is safely stored)."""
    return Webhook(secret).verify(body, headers)


def quick_start(base_url: str, token: str, sample_url: str, file_id: str = "quick-start") -> dict:
    """The README's quick start in Python: a job from a URL, waited for, and its result."""
    job = create_from_url(base_url, token, sample_url, extractor="sandbox", file_id=file_id)
    job = wait_for(job["links"]["self"], token)
    if job["status"] != "succeeded":
        raise RuntimeError(f"job {job['id']} ended {job['status']}: {job['error']}")
    return fetch_result(job, token)


if __name__ == "__main__":
    # The ports `make run` takes, from the same variables (PORT=8011 make run: PORT=8011 here).
    service = f"http://127.0.0.1:{os.environ.get('PORT', '8000')}"
    sandbox = f"http://127.0.0.1:{os.environ.get('SANDBOX_PORT', '8765')}"
    result = quick_start(service, os.environ["KEY"], f"{sandbox}/samples/grant-report.txt")
    print(result["payload"]["pages"][0]["text"])
