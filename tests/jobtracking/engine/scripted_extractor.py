"""An extractor speaking http_async over real HTTP (pytest-httpserver) that answers each document
as its test scripts it: good answers by default, and, for a document a test names, the answers
it gives (raw bytes, any status and headers), in turn. It counts submissions per idempotency
key, so a test proves that no job was submitted twice."""

import json
import re
import threading
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from django.core.files.base import ContentFile
from werkzeug import Request, Response

from jobtracking.services import Actor, NewJob, job_create

COLLECTION = "/v1/extractions"
GOOD_RESULT = {"model": "scripted-1", "pages": [{"number": 1, "text": "Total revenue: 1,234"}]}


@dataclass
class Answer:
    status: int = 200
    body: bytes | str | dict = b""
    headers: dict[str, str] = field(default_factory=dict)

    def response(self) -> Response:
        body = self.body
        if isinstance(body, dict):
            body = json.dumps(body)
        return Response(
            body, status=self.status, headers=self.headers, content_type="application/json"
        )


class ScriptedExtractor:
    def __init__(self, httpserver) -> None:
        self.server = httpserver
        self.url = httpserver.url_for("/").rstrip("/")
        self.scripts: dict[tuple[str, str], list[Answer]] = {}
        self.submissions: Counter[str] = Counter()
        self.calls: defaultdict[str, Counter[str]] = defaultdict(Counter)
        self.lock = threading.Lock()
        httpserver.expect_request(re.compile(f"^{COLLECTION}.*")).respond_with_handler(self.handle)

    def script(self, name: str, stage: str, *answers: Answer) -> None:
        """What document `name` gets at `stage` (submit, poll, result): these answers in turn,
        the last one again and again."""
        self.scripts[(name, stage)] = list(answers)

    def handle(self, request: Request) -> Response:
        path = request.path[len(COLLECTION) :].strip("/")
        if request.method == "POST":
            name = request.files["file"].filename
            with self.lock:
                self.submissions[request.headers.get("Idempotency-Key", "")] += 1
            stage, default = "submit", Answer(202, {"id": f"x-{name}", "status": "queued"})
        elif path.endswith("/result"):
            name, stage, default = path[2:-7], "result", Answer(200, GOOD_RESULT)
        else:
            name, stage, default = path[2:], "poll", Answer(200, {"status": "succeeded"})
        if request.method == "DELETE":
            return Response(status=204)
        with self.lock:
            self.calls[name][stage] += 1
            answers = self.scripts.get((name, stage))
            answer = (answers.pop(0) if len(answers) > 1 else answers[0]) if answers else default
        return answer.response()

    def new_job(self, extractor, name: str, user=None):
        new = NewJob(
            extractor=extractor,
            file_id=name,
            file_name=name,
            upload=ContentFile(f"Document {name}\nTotal: 1,234\n".encode(), name=name),
        )
        return job_create(new, actor=Actor("api", user))
