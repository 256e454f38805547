"""Exceptions that carry a user-facing reason and the exit code the CLI maps them to."""
from __future__ import annotations


class QualifyError(Exception):
    """Base: a failure with a one-line, user-facing message. Never shown as a traceback."""

    exit_code = 3


class UsageError(QualifyError):
    """Bad input from the user (file, field, expected, got). Exit 2."""

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, field: str | None = None,
                 expected: str | None = None, got: object = None) -> None:
        parts = []
        if file:
            parts.append(str(file))
        if field:
            parts.append(field)
        head = ": ".join(parts)
        detail = message
        if expected is not None:
            detail += f" (expected {expected}, got {got!r})"
        super().__init__(f"{head}: {detail}" if head else detail)
        self.file, self.field, self.expected, self.got = file, field, expected, got


class RunFailed(QualifyError):
    """A run that could not complete or is inconclusive (worker died, timeout, interrupt). Exit 3."""

    exit_code = 3

    def __init__(self, reason: str, *, evidence_dir: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.evidence_dir = evidence_dir


class EvidenceInvalid(QualifyError):
    """An evidence directory failed verification. Exit 1."""

    exit_code = 1
