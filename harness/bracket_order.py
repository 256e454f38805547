"""Bracket order: the executed order of a protocol's arms as numbered blocks.

Pure: a resolved protocol in, a list of visits out (no IO). Kinds:

- ``ABA`` (default): each arm once in schedule order (A, cand, B): the classic bracket.
- ``ABBA``: the schedule order followed by its mirror image (A cand B | B cand A), so a
  linear drift in time hits every arm's mean alike: the ABBA counterbalanced design
  (e.g. Cook & Campbell 1979, "Quasi-Experimentation", counterbalancing of order effects).
- ``randomized``: randomized complete blocks (Fisher 1935; Montgomery, "Design and Analysis
  of Experiments", ch. 4): ``rounds`` rounds, each visiting every arm once in an order drawn
  from numpy's PCG64 seeded with the protocol's schedule seed.
- ``interleaved``: every arm's worker starts fresh and stays alive; requests go round-robin
  (one request per arm per round, in schedule order), so slow machine drift hits all arms
  alike. A block is one round.

In the sequential kinds (ABA, ABBA, randomized) a block is one visit: one fresh worker of
one arm running W warm-ups and its share of the arm's N measured requests (N split as evenly
as possible over its visits, earlier visits taking the remainder).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

KINDS = ("ABA", "ABBA", "randomized", "interleaved")
SEQUENTIAL = ("ABA", "ABBA", "randomized")
DEFAULT_ROUNDS = 2          # randomized: rounds when the protocol does not say
DEFAULT = {"kind": "ABA", "seed": None, "rounds": 1}


@dataclass(frozen=True)
class Visit:
    """One block of a sequential schedule: a fresh worker of one arm."""

    block: int       # 0-based position in the executed order
    arm: str
    visit: int       # 0-based visit number of this arm
    visits: int      # how many visits this arm gets
    warmups: int
    measured: int


def plan_of(protocol: dict[str, Any]) -> dict[str, Any]:
    """The protocol's schedule plan ({"kind", "seed", "rounds"}); ABA for protocols without one."""
    return dict(protocol.get("schedule_plan") or DEFAULT)


def rounds_of(plan: dict[str, Any]) -> int:
    """How many times a sequential schedule visits each arm."""
    return {"ABA": 1, "ABBA": 2}.get(plan["kind"], int(plan.get("rounds") or 1))


def split(n: int, parts: int) -> list[int]:
    """n measured requests over `parts` visits: as even as possible, earlier visits first."""
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def round_orders(order: list[str], plan: dict[str, Any]) -> list[list[str]]:
    """The arm order of each round of a sequential schedule."""
    kind = plan["kind"]
    if kind == "ABA":
        return [list(order)]
    if kind == "ABBA":
        return [list(order), list(reversed(order))]
    if kind == "randomized":
        rng = np.random.default_rng(int(plan.get("seed") or 0))
        return [[order[i] for i in rng.permutation(len(order))] for _ in range(rounds_of(plan))]
    raise ValueError(f"{kind!r} is not a sequential schedule")


def visits(protocol: dict[str, Any]) -> list[Visit]:
    """The blocks of a sequential (ABA / ABBA / randomized) bracket schedule, in executed order.

    Raises:
        ValueError: an arm has fewer measured requests than visits (check() says it first).
    """
    plan = plan_of(protocol)
    arms = {a["id"]: a for a in protocol["arms"]}
    rounds = round_orders(list(protocol["schedule"]), plan)
    per_arm = {a: split(arms[a]["measured"], len(rounds)) for a in arms}
    out: list[Visit] = []
    for r, order in enumerate(rounds):
        for arm in order:
            n = per_arm[arm][r]
            if n < 1:
                raise ValueError(f"arm {arm} has {arms[arm]['measured']} measured requests for "
                                 f"{len(rounds)} visits")
            out.append(Visit(len(out), arm, r, len(rounds), arms[arm]["warmups"], n))
    return out


def check(protocol: dict[str, Any]) -> str | None:
    """Why the schedule cannot run with these counts (None when it can)."""
    plan = plan_of(protocol)
    if plan["kind"] not in SEQUENTIAL:
        return None
    rounds = rounds_of(plan)
    for arm in protocol["arms"]:
        if arm["measured"] < rounds:
            return (f"arm {arm['id']} has {arm['measured']} measured requests, but schedule "
                    f"{plan['kind']} visits it {rounds} times (at least one measured request "
                    f"per visit)")
    return None
