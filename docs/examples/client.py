"""A client of the jobs API, as docs/api.md shows it: upload a file, wait for the job with
backoff, and verify a webhook. Only `requests` and `standardwebhooks` are needed
(tests/jobtracking/api/test_client_example.py runs it against a live server)."""

import random
import time

import requests
from standardwebhooks import Webhook

FINISHED = {"succeeded", "failed", "timed_out", "cancelled"}


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
    if response.status_code >= 400:
        problem = response.json()  # application/problem+json: code, detail, errors
        raise RuntimeError(f"{problem['code']}: {problem['detail']} {problem.get('errors', '')}")
    return response.json()


def wait_for(job_url: str, token: str, *, timeout: float = 600, first_wait: float = 1.0) -> dict:
    """Poll the job until it is finished: waits double up to 30 s, with jitter, and a 429's
    Retry-After is honoured."""
    deadline = time.monotonic() + timeout
    wait = first_wait
    while True:
        response = requests.get(job_url, headers={"Authorization": f"Token {token}"}, timeout=30)
        if response.status_code == 429:
            time.sleep(float(response.headers.get("Retry-After", wait)))
            continue
        response.raise_for_status()
        job = response.json()
        if job["status"] in FINISHED:
            return job
        if time.monotonic() + wait > deadline:
            raise TimeoutError(f"job {job['id']} still {job['status']} after {timeout} s")
        time.sleep(wait * random.uniform(0.8, 1.2))
        wait = min(wait * 2, 30.0)


def verify_webhook(secret: str, body: bytes, headers: dict[str, str]) -> dict:
    """The event, if the signature and timestamp are right; raises WebhookVerificationError
    otherwise (answer 400 then, and 2xx only after the event is safely stored)."""
    return Webhook(secret).verify(body, headers)
