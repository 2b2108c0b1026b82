"""Verify an audit bundle offline: python verify_bundle.py BUNDLE_DIR [--public-key HEX]
Needs Python 3.9+ and the `cryptography` package; nothing of the service that wrote it."""

import argparse
import gzip
import hashlib
import json
import sys
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

GENESIS = "0" * 64


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def merkle_root(leaves):
    level = [hashlib.sha256(b"\x00" + ":".join(leaf).encode()).digest() for leaf in leaves]
    if not level:
        return sha256(b"")
    while len(level) > 1:
        pairs = [
            hashlib.sha256(b"\x01" + level[i] + level[i + 1]).digest()
            for i in range(0, len(level) - 1, 2)
        ]
        level = pairs + ([level[-1]] if len(level) % 2 else [])
    return level[0].hex()


def check_files(bundle: Path, manifest: dict, problems: list) -> None:
    for name, entry in manifest["files"].items():
        path = bundle / name
        if not path.is_file():
            problems.append(f"{name}: listed in the manifest, missing")
        elif sha256(path.read_bytes()) != entry["sha256"]:
            problems.append(f"{name}: sha256 differs from the manifest's")


def check_checkpoints(bundle: Path, key: Ed25519PublicKey, problems: list) -> list:
    lines = (bundle / "checkpoints.jsonl").read_text().splitlines()
    checkpoints = [json.loads(line) for line in lines]
    prev = GENESIS
    for number, checkpoint in enumerate(checkpoints, start=1):
        where, statement = f"checkpoint {checkpoint['number']}", checkpoint["statement"]
        try:
            key.verify(bytes.fromhex(checkpoint["signature"]), statement.encode())
        except (InvalidSignature, ValueError):
            problems.append(f"{where}: signature invalid for this public key")
        signed = json.loads(statement)
        if checkpoint["number"] != number or signed["number"] != number:
            problems.append(f"{where}: expected checkpoint {number} here")
        if signed["prev"] != prev:
            problems.append(f"{where}: does not follow the checkpoint before it")
        if signed["root"] != merkle_root(checkpoint["leaves"]):
            problems.append(f"{where}: its leaves do not give the signed root")
        prev = sha256(statement.encode())
    return checkpoints


def check_day(lines, problems: list, heads: dict) -> tuple:
    jobs = changes = 0
    for line in lines:
        job = json.loads(line)
        jobs, prev, where = jobs + 1, GENESIS, f"job {job['job']}"
        for n, change in enumerate(job["changes"], start=1):
            content = json.loads(change["canonical"])
            if sha256(change["canonical"].encode()) != change["hash"]:
                problems.append(f"{where}, change {n}: content does not give its hash")
            if not change["prev_hash"] == content["prev"] == prev:
                problems.append(f"{where}, change {n}: does not follow the change before")
            if content["job"] != job["job"]:
                problems.append(f"{where}, change {n}: belongs to job {content['job']}")
            prev = change["hash"]
        if prev != (job["audit_head"] or GENESIS):
            problems.append(f"{where}: its last change is not its recorded head")
        heads[job["job"]] = {change["hash"] for change in job["changes"]}
        changes += len(job["changes"])
    return jobs, changes


def check_jobs(bundle: Path, manifest: dict, problems: list) -> dict:
    heads = {}  # job id -> every hash of its chain
    for name, entry in manifest["files"].items():
        if not name.startswith("jobs-"):
            continue
        with gzip.open(bundle / name, "rt", encoding="utf-8") as lines:
            jobs, changes = check_day(lines, problems, heads)
        if (jobs, changes) != (entry["jobs"], entry["changes"]):
            problems.append(f"{name}: {jobs} jobs, {changes} changes; manifest says otherwise")
    return heads


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bundle", type=Path)
    parser.add_argument("--public-key", help="hex; the key you were given (else the bundle's)")
    args = parser.parse_args()
    manifest = json.loads((args.bundle / "manifest.json").read_text())
    problems = []
    check_files(args.bundle, manifest, problems)
    key_hex = args.public_key or (args.bundle / "public_key.txt").read_text().strip()
    key = Ed25519PublicKey.from_public_bytes(bytes.fromhex(key_hex))
    checkpoints = check_checkpoints(args.bundle, key, problems)
    heads = check_jobs(args.bundle, manifest, problems)
    for checkpoint in checkpoints:  # a signed head of a job of these days must be here
        for job_id, day, head in checkpoint["leaves"]:
            if manifest["from"] <= day <= manifest["to"] and head not in heads.get(job_id, ()):
                problems.append(
                    f"checkpoint {checkpoint['number']}: job {job_id} "
                    f"{'lacks its signed head' if job_id in heads else 'is missing'}"
                )
    for problem in problems:
        print("FAILED:", problem)
    if not problems:
        print(
            f"OK: {len(heads)} jobs, {manifest['changes']} changes, "
            f"{len(checkpoints)} checkpoints, key {sha256(bytes.fromhex(key_hex))[:16]}"
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
