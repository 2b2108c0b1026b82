"""export_audit writes a bundle that docs/verify_bundle.py, run as its own process without the
project's code, accepts; each tampered copy it refuses, naming what broke. The script in
docs/audit.md is the file."""

import gzip
import hashlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone

from jobtracking import states
from jobtracking.services import SYSTEM, job_transition
from jobtracking.services.audit_checkpoints import audit_checkpoint_create
from tests.factories import ExtractorFactory, api_job

pytestmark = pytest.mark.django_db
DOCS = Path(__file__).resolve().parents[3] / "docs"
SCRIPT = DOCS / "verify_bundle.py"


@pytest.fixture
def bundle(tmp_path, monkeypatch, settings) -> Path:
    """Three jobs with histories, a checkpoint over them, and one more change after it."""
    monkeypatch.setenv("AUDIT_SIGNING_KEY", "11" * 32)
    settings.AUDIT_CHECKPOINT_LAG_SECONDS = 0
    extractor = ExtractorFactory()
    jobs = [api_job(extractor, f"file-{n}") for n in range(3)]
    for job in jobs:
        job_transition(job_id=job.pk, to_status=states.SUBMITTING, actor=SYSTEM)
    audit_checkpoint_create()
    job_transition(job_id=jobs[0].pk, to_status=states.CANCELLED, actor=SYSTEM, reason="é")
    today = timezone.now().date().isoformat()
    call_command("export_audit", "--from", today, "--to", today, str(tmp_path / "bundle"))
    return tmp_path / "bundle"


def run_script(bundle: Path) -> subprocess.CompletedProcess:
    # -I: isolated, so nothing of the project (its directory, PYTHONPATH) is importable.
    return subprocess.run(
        [sys.executable, "-I", str(SCRIPT), str(bundle)],
        capture_output=True,
        text=True,
        cwd=bundle.parent,
        timeout=60,
    )


def day_file(bundle: Path) -> Path:
    (path,) = bundle.glob("jobs-*.jsonl.gz")
    return path


def rewrite(bundle: Path, name: str, change, *, fix_manifest: bool = True) -> None:
    """Edit a file of the bundle; unless told otherwise, its digest in the manifest too (as a
    forger would)."""
    path = bundle / name
    if name.endswith(".gz"):
        lines = gzip.decompress(path.read_bytes()).decode().splitlines()
        path.write_bytes(gzip.compress(("\n".join(change(lines)) + "\n").encode()))
    else:
        path.write_text("\n".join(change(path.read_text().splitlines())) + "\n")
    if fix_manifest:
        manifest = json.loads((bundle / "manifest.json").read_text())
        manifest["files"][name]["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
        (bundle / "manifest.json").write_text(json.dumps(manifest))


def test_verify_bundle_accepts_an_exported_bundle(bundle):
    manifest = json.loads((bundle / "manifest.json").read_text())
    assert manifest["jobs"] == 3 and manifest["changes"] == 7
    first = json.loads(gzip.decompress(day_file(bundle).read_bytes()).splitlines()[0])
    assert set(first) >= {"job", "created_at", "extractor", "file_id", "audit_head", "changes"}
    assert set(first["changes"][0]) == {"canonical", "hash", "prev_hash"}
    done = run_script(bundle)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("OK: 3 jobs, 7 changes, 1 checkpoints")


def _edit_reason(lines):
    job = json.loads(lines[0])
    job["changes"][0]["canonical"] = job["changes"][0]["canonical"].replace(
        '"reason":""', '"reason":"edited"'
    )
    return [json.dumps(job), *lines[1:]]


def _drop_middle_change(lines):
    job = json.loads(lines[0])
    del job["changes"][1]
    return [json.dumps(job), *lines[1:]]


def _swap_changes(lines):
    job = json.loads(lines[0])
    job["changes"][0], job["changes"][1] = job["changes"][1], job["changes"][0]
    return [json.dumps(job), *lines[1:]]


def _forge_signature(lines):
    checkpoint = json.loads(lines[0])
    checkpoint["signature"] = "00" * 64
    return [json.dumps(checkpoint)]


@pytest.mark.parametrize(
    "name, change, fix_manifest, named",
    [
        ("jobs", _edit_reason, True, "change 1: content does not give its hash"),
        ("jobs", _drop_middle_change, True, "change 2: does not follow the change before"),
        ("jobs", _swap_changes, True, "change 1: does not follow the change before"),
        ("jobs", lambda lines: lines[1:], True, "is missing"),
        ("jobs", lambda lines: lines[:-1], False, "sha256 differs from the manifest's"),
        ("checkpoints.jsonl", _forge_signature, True, "checkpoint 1: signature invalid"),
    ],
    ids=["edited", "deleted-change", "reordered", "deleted-job", "unlisted", "signature"],
)
def test_verify_bundle_refuses_a_tampered_bundle(bundle, name, change, fix_manifest, named):
    copy = bundle.parent / "tampered"
    shutil.copytree(bundle, copy)
    rewrite(
        copy, day_file(copy).name if name == "jobs" else name, change, fix_manifest=fix_manifest
    )
    done = run_script(copy)
    assert done.returncode == 1
    assert named in done.stdout, done.stdout


def test_verify_bundle_refuses_another_public_key(bundle):
    done = subprocess.run(
        [sys.executable, "-I", str(SCRIPT), str(bundle), "--public-key", "ab" * 32],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and "signature invalid for this public key" in done.stdout


def test_export_audit_refuses_a_directory_in_use(bundle):
    with pytest.raises(CommandError, match="not empty"):
        call_command("export_audit", "--from", "2026-01-01", "--to", "2026-01-01", str(bundle))


def test_audit_doc_shows_the_verifier_as_it_is():
    doc = (DOCS / "audit.md").read_text()
    (shown,) = re.findall(r"<!-- verify_bundle.py -->\n```python\n(.*?)```", doc, re.DOTALL)
    assert shown == SCRIPT.read_text()
