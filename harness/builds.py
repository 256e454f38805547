"""Arms built from git refs: resolve each ref to a commit, build it once in its own worktree, cache it.

`[build] repo = PATH`, `command = [...]`, `artifacts = [...]`; an arm may name `ref = "main"`.
For each distinct commit the build command runs once, in a detached `git worktree` of the
repository under the build cache (outside any evidence directory: ``DQ_BUILD_CACHE``, default
``~/.cache/dflash-qualify/builds``), keyed by the commit and the SHA-256 of the build command
and artifact list, so a second run with the same refs builds nothing. `{worktree}` in the build
command and in an arm's command is that worktree's absolute path. Every artifact's SHA-256 is
recorded (and re-checked when a cached build is reused: a modified artifact is rebuilt), with
the commit and the build log, for the evidence.

Arms whose engine builds differ: reference arms must run one build; the candidate may differ
from them only when the protocol says so (it names another ref). `conflicts` names every
violation; the protocol's verdict refuses such a bracket.

asv builds each commit in its own environment the same way (asv.readthedocs.io, "Environments").
"""
from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from .errors import RunFailed, UsageError

CACHE_ENV = "DQ_BUILD_CACHE"
RECORD = "build.json"       # written last: a directory without it is an unfinished build
LOG = "build.log"
WORKTREE = "worktree"
PLACEHOLDER = "{worktree}"
LOG_TAIL = 2000             # characters of a failed build's log quoted in the error


@dataclass(frozen=True)
class BuildSpec:
    """The protocol's [build] table."""

    repo: Path
    command: tuple[str, ...]
    artifacts: tuple[str, ...]

    @property
    def command_hash(self) -> str:
        """SHA-256 of the build command and artifact list (part of the cache key)."""
        blob = json.dumps({"command": list(self.command), "artifacts": list(self.artifacts)},
                          sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()


@dataclass(frozen=True)
class Build:
    """One commit built (or found in the cache): what the evidence records about it."""

    ref: str
    commit: str
    worktree: Path
    log: Path
    artifacts: dict[str, str]      # path relative to the worktree -> SHA-256
    command_hash: str
    cached: bool                   # True: reused from the cache, nothing was built
    seconds: float                 # the build command's wall time when it was built

    def record(self) -> dict[str, Any]:
        return {"ref": self.ref, "commit": self.commit, "worktree": str(self.worktree),
                "artifacts": dict(self.artifacts), "command_hash": self.command_hash,
                "cached": self.cached, "build_seconds": round(self.seconds, 3),
                "log_sha256": sha256_file(self.log)}


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "dflash-qualify" / "builds")


def parse(ck: Any, table: Any, base_dir: Path) -> BuildSpec:
    """Validate [build] (ck: the protocol checker, whose fail() raises a one-line UsageError)."""
    if not isinstance(table, dict):
        ck.fail("build", "a table", table)
    ck.table(table, "build", {"repo", "command", "artifacts"}, {"repo", "command", "artifacts"})
    repo_text = ck.string(table["repo"], "build.repo")
    repo = Path(repo_text).expanduser()
    if not repo.is_absolute():
        repo = (base_dir / repo).resolve()
    if not (repo / ".git").exists():
        ck.fail("build.repo", "a git repository (a directory holding .git)", repo_text)
    command = table["command"]
    if not isinstance(command, list) or not command or not all(
            isinstance(c, str) and c and "\0" not in c for c in command):
        ck.fail("build.command", "a non-empty array of strings (program and arguments)", command)
    artifacts = table["artifacts"]
    if not isinstance(artifacts, list) or not artifacts or not all(
            isinstance(a, str) and a for a in artifacts):
        ck.fail("build.artifacts", "a non-empty array of paths relative to the worktree",
                artifacts)
    for i, a in enumerate(artifacts):
        parts = Path(a).parts
        if Path(a).is_absolute() or ".." in parts:
            ck.fail(f"build.artifacts[{i}]", "a path inside the worktree (relative, no '..')", a)
    return BuildSpec(repo=repo, command=tuple(command), artifacts=tuple(artifacts))


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RunFailed(f"git {' '.join(args)} in {repo} failed: "
                        f"{(proc.stderr or proc.stdout).strip()[:300]}")
    return proc.stdout.strip()


def resolve_ref(repo: Path, ref: str) -> str:
    """The full commit id a ref names (branch, tag, sha, HEAD~1, ...); UsageError if none."""
    proc = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet",
                           f"{ref}^{{commit}}"], capture_output=True, text=True)
    if proc.returncode != 0 or not proc.stdout.strip():
        raise UsageError(f"ref {ref!r} names no commit in {repo}", field="arms.ref")
    return proc.stdout.strip()


def _slot(spec: BuildSpec, commit: str, root: Path) -> Path:
    repo_key = hashlib.sha256(str(spec.repo.resolve()).encode()).hexdigest()[:8]
    return root / f"{spec.repo.name}-{repo_key}" / f"{commit[:16]}-{spec.command_hash[:12]}"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)   # two runs building one commit: the second waits
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _hash_artifacts(spec: BuildSpec, worktree: Path) -> dict[str, str] | str:
    """{artifact: sha256}, or the first problem (missing, not a file)."""
    out = {}
    for rel in spec.artifacts:
        path = worktree / rel
        if not path.is_file():
            return f"artifact {rel} is missing after the build (expected a file at {path})"
        out[rel] = sha256_file(path)
    return out


def _cached(spec: BuildSpec, slot: Path, ref: str, commit: str) -> Build | None:
    try:
        saved = json.loads((slot / RECORD).read_text())
    except (OSError, ValueError):
        return None
    worktree = slot / WORKTREE
    hashes = _hash_artifacts(spec, worktree)
    if saved.get("commit") != commit or hashes != saved.get("artifacts"):
        return None   # an artifact changed since it was built: build again
    return Build(ref=ref, commit=commit, worktree=worktree, log=slot / LOG, artifacts=hashes,
                 command_hash=spec.command_hash, cached=True,
                 seconds=float(saved.get("build_seconds", 0.0)))


def build(spec: BuildSpec, ref: str, *, root: Path | None = None,
          on_progress: Callable[[str], None] | None = None) -> Build:
    """The build of one ref: from the cache when its commit was built with this command.

    Raises:
        UsageError: the ref names no commit.
        RunFailed: the worktree could not be made, the build command failed (its log's tail
            is quoted), or an artifact is missing afterwards.
    """
    say = on_progress or (lambda text: None)
    commit = resolve_ref(spec.repo, ref)
    slot = _slot(spec, commit, root or cache_root())
    with _locked(slot.with_suffix(".lock")):
        hit = _cached(spec, slot, ref, commit)
        if hit is not None:
            say(f"build {ref} ({commit[:12]}): cached")
            return hit
        worktree = slot / WORKTREE
        if slot.exists():   # an unfinished or stale build: start over
            subprocess.run(["git", "-C", str(spec.repo), "worktree", "remove", "--force",
                            str(worktree)], capture_output=True)
            shutil.rmtree(slot, ignore_errors=True)
        slot.mkdir(parents=True)
        _git(spec.repo, "worktree", "prune")
        _git(spec.repo, "worktree", "add", "--detach", "--force", str(worktree), commit)
        argv = [part.replace(PLACEHOLDER, str(worktree)) for part in spec.command]
        say(f"build {ref} ({commit[:12]}): {' '.join(argv)}")
        t0 = time.perf_counter()
        with open(slot / LOG, "wb") as log:
            log.write(f"[dflash-qualify] build {ref} = {commit} in {worktree}\n"
                      f"[dflash-qualify] $ {' '.join(argv)}\n".encode())
            log.flush()
            try:
                proc = subprocess.run(argv, cwd=worktree, stdin=subprocess.DEVNULL, stdout=log,
                                      stderr=subprocess.STDOUT)
                code = proc.returncode
            except OSError as exc:
                log.write(f"[dflash-qualify] cannot run the build command: {exc}\n".encode())
                code = None
        seconds = time.perf_counter() - t0
        if code != 0:
            tail = (slot / LOG).read_text("utf-8", "replace")[-LOG_TAIL:]
            raise RunFailed(f"build of {ref} ({commit[:12]}) failed (exit code {code}); log "
                            f"{slot / LOG}: ...{' '.join(tail.split())[-400:]}")
        hashes = _hash_artifacts(spec, worktree)
        if isinstance(hashes, str):
            raise RunFailed(f"build of {ref} ({commit[:12]}): {hashes}")
        (slot / RECORD).write_text(json.dumps({
            "repo": str(spec.repo), "ref": ref, "commit": commit, "command": list(spec.command),
            "command_hash": spec.command_hash, "artifacts": hashes,
            "build_seconds": round(seconds, 3),
            "built_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=2) + "\n")
        say(f"build {ref} ({commit[:12]}): built in {seconds:.1f} s")
        return Build(ref=ref, commit=commit, worktree=worktree, log=slot / LOG,
                     artifacts=hashes, command_hash=spec.command_hash, cached=False,
                     seconds=seconds)


def build_arms(spec: BuildSpec, arms: list[dict[str, Any]], *, root: Path | None = None,
               on_progress: Callable[[str], None] | None = None) -> dict[str, Build]:
    """arm id -> its Build, for every arm naming a ref; each distinct commit is built once."""
    by_commit: dict[str, Build] = {}
    out: dict[str, Build] = {}
    for arm in arms:
        ref = arm.get("ref")
        if ref is None:
            continue
        commit = resolve_ref(spec.repo, ref)
        if commit not in by_commit:
            by_commit[commit] = build(spec, ref, root=root, on_progress=on_progress)
        b = by_commit[commit]
        out[arm["id"]] = b if b.ref == ref else dataclasses.replace(b, ref=ref)
    return out


def substitute(argv: list[str], b: Build) -> list[str]:
    """An arm's command with {worktree} replaced by its build's worktree."""
    return [part.replace(PLACEHOLDER, str(b.worktree)) for part in argv]


def engine_build_id(record: dict[str, Any]) -> str:
    """One id for an arm's engine build: the SHA-256 over its commit and artifact hashes."""
    blob = json.dumps({"commit": record.get("commit"), "artifacts": record.get("artifacts")},
                      sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()


def conflicts(arms: list[dict[str, Any]]) -> list[str]:
    """Why these arms' engine builds may not be compared (empty: they may).

    Each arm is a resolved protocol arm; its ``build`` record (when it names a ref) holds the
    commit and artifact hashes. Reference arms must run one engine build. The candidate may
    run another only when it names a different ref than the references (the protocol says
    so); naming the same ref, it must run the same build.
    """
    built = [a for a in arms if isinstance(a.get("build"), dict)]
    if not built:
        return []
    problems = []
    refs = [a for a in built if a["role"] == "reference"]
    ids = {a["id"]: engine_build_id(a["build"]) for a in built}
    if len({ids[a["id"]] for a in refs}) > 1:
        names = ", ".join(f"{a['id']} = {a['build']['ref']} ({a['build']['commit'][:12]})"
                          for a in refs)
        problems.append(f"reference arms run different engine builds ({names}); a bracket's "
                        "references must run one build")
    for cand in (a for a in built if a["role"] == "candidate"):
        for ref in refs:
            if cand["build"]["ref"] == ref["build"]["ref"] and ids[cand["id"]] != ids[ref["id"]]:
                problems.append(f"arm {cand['id']} names ref {cand['build']['ref']} like "
                                f"{ref['id']} but runs a different engine build")
    with_ref = [a for a in arms if a.get("ref") is not None]
    if with_ref and len(with_ref) != len(arms):
        missing = ", ".join(a["id"] for a in arms if a.get("ref") is None)
        problems.append(f"arms {missing} name no ref while others do: their engine build is "
                        "not recorded, so it cannot be compared")
    return problems


# --------------------------------------------------------------------------- protocol hooks

def resolve_section(ck: Any, doc: dict[str, Any], arms_doc: list[Any], target: dict[str, Any],
                    base_dir: Path) -> dict[str, Any] | None:
    """Validate [build] and every arm's `ref`; returns the resolved [build] (None without one).

    Rules: `ref` needs [build]; [build] needs a target that starts a command (command, llamacpp,
    openai) and at least one arm naming a ref; `{worktree}` may appear only in the commands of
    arms naming a ref (an arm without its own command uses the target's).
    """
    has = "build" in doc
    refs = {}
    for i, a in enumerate(arms_doc):
        if isinstance(a, dict) and "ref" in a:
            if not has:
                ck.fail(f"arms[{i}].ref", "no ref without a [build] table (repo, command, "
                        "artifacts)", a["ref"])
            refs[i] = ck.string(a["ref"], f"arms[{i}].ref")
    if not has:
        return None
    spec = parse(ck, doc["build"], base_dir)
    if target.get("kind") not in ("command", "llamacpp", "openai") or not target.get("command"):
        ck.fail("build", "a target that starts a command per arm (command, llamacpp or openai "
                "with target.command)", found=f"target kind {target.get('kind')!r}")
    if not refs:
        ck.fail("arms", "at least one arm naming a ref when [build] is given", found="none")
    for i, a in enumerate(arms_doc):
        argv = a.get("command") or target["command"]
        if i not in refs and any(PLACEHOLDER in part for part in argv):
            ck.fail(f"arms[{i}].ref", "a ref: this arm's command uses {worktree}", found="none")
    return {"repo": str(spec.repo), "command": list(spec.command),
            "artifacts": list(spec.artifacts), "command_hash": spec.command_hash}


def spec_of(section: dict[str, Any]) -> BuildSpec:
    return BuildSpec(repo=Path(section["repo"]), command=tuple(section["command"]),
                     artifacts=tuple(section["artifacts"]))


def prepare(protocol: dict[str, Any], *, root: Path | None = None,
            on_progress: Callable[[str], None] | None = None) -> dict[str, Build]:
    """Build every arm's ref (once per commit) and fill the resolved protocol in place.

    Each arm naming a ref gets ``arm["build"]`` = Build.record() and ``arm["command"]`` =
    its command (or the target's) with {worktree} substituted. Returns arm id -> Build.
    """
    section = protocol["build"]
    done = build_arms(spec_of(section), protocol["arms"], root=root, on_progress=on_progress)
    for arm in protocol["arms"]:
        b = done.get(arm["id"])
        if b is None:
            continue
        arm["build"] = b.record()
        arm["command"] = substitute(arm.get("command") or protocol["target"]["command"], b)
    return done
