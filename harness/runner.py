"""The request loop: drive a resolved protocol's arms through targets and record raw samples.

`Runner` owns the loop (sequential schedules: one fresh target per visit in bracket order;
interleaved and compare: one fresh target per arm kept alive while rounds alternate) and turns
each response into a samples.jsonl record as it arrives, through the evidence writer it is
given. It knows no evidence kind: the kinds (harness/kinds) run it inside the one sealing path
(harness/evidence/sealing.py), which kills and reaps its workers on failure. Nothing here prints.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from . import bracket_order, environment, gpu, sequential
from .errors import RunFailed
from .targets import Request, Response, Target, TargetError, make_target

MakeTarget = Callable[[dict, dict], Target]


@dataclass(frozen=True)
class Event:
    """A progress event for the display: one arm started/finished or one request done."""

    kind: str                    # "arm_start" | "request" | "arm_end" | "build" | "look" (label: text)
    arm: str
    label: str
    phase: str | None = None     # "warmup" | "measured"
    index: int = 0               # 1-based request number within the phase
    total: int = 0               # requests in the phase
    value: float | None = None
    median: float | None = None  # running median of the arm's measured values
    group: str | None = None
    metric: str = ""


def metric_value(metric: str, r: Response) -> float:
    """The protocol metric for one response (tok/s from the engine's own prefill/decode time)."""
    if metric == "prefill_ms":
        return r.prefill_ms
    if metric == "total_ms":
        return r.prefill_ms + r.decode_ms
    if metric == "prefill_tok_s":
        return r.prompt_tokens / (r.prefill_ms / 1e3) if r.prefill_ms > 0 else 0.0
    if metric == "decode_tok_s":
        return r.generated_tokens / (r.decode_ms / 1e3) if r.decode_ms > 0 else 0.0
    raise ValueError(f"unknown metric {metric!r}")


def _look_text(look: dict) -> str:
    """One look as a progress line: blocks, bound, decision."""
    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:+.2f}%"
    return (f"block {look['n']}: gain {pct(look['gain_pct'])}, bound [{pct(look['lo_pct'])}, "
            f"{pct(look['hi_pct'])}], {look['decision']}"
            + (f" ({look['stop']})" if look.get("stop") else ""))


def _number_or_none(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Runner:
    """Runs every arm of one resolved protocol and appends sample records to the writer."""

    def __init__(self, protocol: dict[str, Any], writer: Any,
                 make_target: MakeTarget = make_target,
                 on_event: Callable[[Event], None] | None = None) -> None:
        self.protocol = protocol
        self.writer = writer
        self.make_target = make_target
        self.on_event = on_event or (lambda e: None)
        self.arms = {a["id"]: a for a in protocol["arms"]}
        self.samples: list[dict[str, Any]] = []
        self.arm_info: dict[str, dict[str, Any]] = {}
        self.live: list[Target] = []
        self._measured: dict[str, list[float]] = {}
        self._deadline: dict[str, float] = {}
        self._indices: dict[tuple[str, str], int] = {}
        self._log_names: dict[int, str] = {}   # id(target) -> log file stem
        # cuda targets: nvidia-smi is read before and after every visit of every arm
        self._read_gpu = environment.target_device(protocol) == "cuda"
        self.looks: list[dict[str, Any]] = []   # sequential brackets: one record per block

    # ------------------------------------------------------------------ public
    def run(self) -> list[dict[str, Any]]:
        """Run the schedule; returns the sample records (also appended to samples.jsonl)."""
        try:
            if self.protocol.get("sequential"):  # blocks of fresh workers until decided
                self._run_blocks()
            elif self.protocol.get("groups"):  # compare: every prompt a group, arms alternate
                self._run_interleaved(self.protocol["prompts"], grouped=True)
            elif bracket_order.plan_of(self.protocol)["kind"] == "interleaved":
                self._run_interleaved(self.protocol["prompts"][:1], grouped=False)
            else:  # ABA, ABBA, randomized: one fresh worker per block
                for visit in bracket_order.visits(self.protocol):
                    self._run_visit(visit)
        except BaseException:
            self.kill_all()  # a failed or interrupted run: no graceful wait, no orphan
            raise
        finally:
            self.stop_all()
        return self.samples

    def stop_all(self) -> None:
        """Tear down every live target and save its log (idempotent, never raises)."""
        while self.live:
            target = self.live.pop()
            try:
                log = target.teardown()
            except Exception as exc:  # teardown must not hide the original failure
                log = f"(teardown failed: {exc})\n"
            with contextlib.suppress(Exception):
                self._save_log(target, log)

    def kill_all(self) -> None:
        """Immediate kill of every live worker (used when interrupted)."""
        for target in self.live:
            kill = getattr(target, "kill", None)
            if kill is not None:
                with contextlib.suppress(Exception):
                    kill()

    # ------------------------------------------------------------------ schedules
    def _start(self, arm: dict) -> Target:
        target = self.make_target(self.protocol, arm)
        self.live.append(target)
        started = time.monotonic()
        self._deadline[arm["id"]] = started + self.protocol["timeouts"]["arm_s"]
        info = target.prepare()
        info["start_s"] = round(time.monotonic() - started, 3)
        self._check_same_model(arm["id"], info)
        if self._read_gpu:  # after start-up (the engine holds the GPU), before any request
            visits = self.arm_info.get(arm["id"], {}).get("gpu") or []
            info["gpu"] = visits + [{"visit": len(visits), "before": gpu.read(), "after": None}]
        self.arm_info[arm["id"]] = info
        return target

    def _check_same_model(self, arm_id: str, info: dict) -> None:
        """Arms must run the same model and weights (pyperf's guard: never pool unlike runs)."""
        mine = info.get("config_hash")
        for other, seen in self.arm_info.items():
            theirs = seen.get("config_hash")
            if mine and theirs and mine != theirs:
                raise RunFailed(f"arm {arm_id} runs model config {mine[:12]} but arm {other} "
                                f"ran {theirs[:12]}: all arms must run the same model and seed")

    def _stop(self, target: Target) -> None:
        visits = self.arm_info.get(target.arm_id, {}).get("gpu")
        if visits:  # after the arm's last request, while its engine still holds the GPU
            visits[-1]["after"] = gpu.read()
        if target in self.live:
            self.live.remove(target)
        self._save_log(target, target.teardown())

    def _save_log(self, target: Target, log: str) -> None:
        name = self._log_names.get(id(target), target.arm_id)
        self.writer.write_text(f"logs/{name}.log", log)  # the writer scrubs secrets

    def _run_visit(self, visit: bracket_order.Visit) -> None:
        """One block of a sequential schedule: a fresh worker, W warm-ups, its measured share."""
        arm = self.arms[visit.arm]
        prompt = self.protocol["prompts"][0]
        self._event("arm_start", arm)
        target = self._start(arm)
        if visit.visits > 1:  # logs/<arm>.log for one visit; logs/<arm>.<k>.log for several
            self._log_names[id(target)] = f"{arm['id']}.{visit.visit + 1}"
        # index counts an arm's requests across its visits, so progress shows "4/5" overall
        totals = {"warmup": visit.warmups * visit.visits, "measured": arm["measured"]}
        for phase, count in (("warmup", visit.warmups), ("measured", visit.measured)):
            for _ in range(count):
                index = self._next_index(arm["id"], phase)
                self._request(target, arm, prompt, phase, index, totals[phase], group=None,
                              block=visit.block)
        self._stop(target)
        self._event("arm_end", arm)

    def _next_index(self, arm_id: str, phase: str) -> int:
        key = (arm_id, phase)
        self._indices[key] = self._indices.get(key, -1) + 1
        return self._indices[key]

    def _run_interleaved(self, prompts: list[dict], *, grouped: bool) -> None:
        """Every arm's worker starts fresh and lives through the run; one request per arm per
        round (a block), in schedule order: slow machine drift hits all arms alike."""
        order = [self.arms[a] for a in self.protocol["schedule"]]
        targets = {}
        for arm in order:
            self._event("arm_start", arm)
            targets[arm["id"]] = self._start(arm)
        block = 0
        for prompt in prompts:
            group = prompt["id"] if grouped else None
            for phase, key in (("warmup", "warmups"), ("measured", "measured")):
                rounds = max(arm[key] for arm in order)
                for i in range(rounds):  # interleaved: main, pr, main, pr, ...
                    for arm in order:
                        if i < arm[key]:
                            self._request(targets[arm["id"]], arm, prompt, phase, i, arm[key],
                                          group=group, block=block)
                    block += 1
        for arm in order:
            self._stop(targets[arm["id"]])
            self._event("arm_end", arm)

    def _run_blocks(self) -> None:
        """A sequential bracket: blocks of fresh workers until decided or the budget is spent.

        Each block starts one fresh worker per arm, in an order shuffled per block (numpy
        PCG64 seeded with gate.seed), runs their warm-up then measured rounds interleaved
        (one request per arm per round) and stops them; then sequential.decide looks at every
        block so far. looks.jsonl records each look and why the run stopped: "decided",
        "responses_differ" (require_identical: no block can mend that), "max_rounds" (the
        next block would pass it) or "max_seconds"."""
        proto = self.protocol
        budget, gate = proto["sequential"], proto["gate"]
        rng = np.random.default_rng(gate["seed"])
        arms = [self.arms[a] for a in proto["schedule"]]
        refs = [a["id"] for a in arms if a["role"] == "reference"]
        cand = next(a["id"] for a in arms if a["role"] == "candidate")
        per_block = max(a["measured"] for a in arms)
        prompt = proto["prompts"][0]
        t0 = time.monotonic()
        blocks: list[sequential.BlockStat] = []
        block = 0
        while True:
            order = [arms[i] for i in rng.permutation(len(arms))]
            first = len(self.samples)
            targets = {}
            for arm in order:
                self._event("arm_start", arm)
                targets[arm["id"]] = self._start(arm)
                self._log_names[id(targets[arm["id"]])] = f"{arm['id']}.{block + 1}"
            for phase, key in (("warmup", "warmups"), ("measured", "measured")):
                for i in range(max(arm[key] for arm in order)):
                    for arm in order:
                        if i < arm[key]:
                            self._request(targets[arm["id"]], arm, prompt, phase, i,
                                          arm[key], group=None, block=block)
            for arm in order:
                self._stop(targets[arm["id"]])
                self._event("arm_end", arm)
            mine = [s for s in self.samples[first:] if s["phase"] == "measured"]
            values = {a: [s["value"] for s in mine if s["arm"] == a] for a in (*refs, cand)}
            blocks.append(sequential.block_stat(block, values[refs[0]], values[cand],
                                                values[refs[-1]], proto["direction"]))
            verdict = sequential.decide(blocks, **sequential.gate_settings(proto))
            elapsed = time.monotonic() - t0
            shas = {s["response_sha256"] for s in self.samples if s.get("response_sha256")}
            stop = ("decided" if verdict.decided_at is not None
                    else "responses_differ" if gate["require_identical"] and len(shas) > 1
                    else "max_rounds" if (block + 2) * per_block > budget["max_rounds"]
                    else "max_seconds" if elapsed >= budget["max_seconds"] else None)
            record = {**sequential.look_json(verdict.looks[-1]), "block": block,
                      "order": [a["id"] for a in order], "elapsed_s": round(elapsed, 3),
                      "stop": stop}
            self.looks.append(record)
            self.writer.append_jsonl("looks.jsonl", record)
            self.on_event(Event(kind="look", arm="", label=_look_text(record),
                                metric=proto["metric"], index=block + 1))
            if stop:
                return
            block += 1

    # ------------------------------------------------------------------ one request
    def _request(self, target: Target, arm: dict, prompt: dict, phase: str, index: int,
                 total: int, *, group: str | None, block: int | None = None) -> None:
        proto = self.protocol
        seq = len(self.samples)
        remaining = self._deadline[arm["id"]] - time.monotonic()
        if remaining <= 0:
            raise RunFailed(f"arm {arm['id']}: arm timeout of "
                            f"{proto['timeouts']['arm_s']:g} s exceeded")
        if proto["target"]["kind"] == "embedded":  # other engine args are worker flags
            options = {k: v for k, v in arm["engine"].items() if k == "mode"}
        else:
            options = dict(arm["engine"])
        request = Request(id=f"{arm['id']}-{seq}", prompt_id=prompt["id"],
                          max_tokens=proto["max_tokens"], text=prompt["text"],
                          timeout_s=min(proto["timeouts"]["request_s"], remaining),
                          options=options)
        t_start = _utc_now()
        t0 = time.perf_counter()
        try:
            response = target.run_once(request)
        except TargetError:
            # the wait was cut short by the arm's deadline: name the arm timeout, not the request
            if (request.timeout_s < proto["timeouts"]["request_s"]
                    and time.monotonic() >= self._deadline[arm["id"]]):
                raise RunFailed(f"arm {arm['id']}: arm timeout of "
                                f"{proto['timeouts']['arm_s']:g} s exceeded while waiting for "
                                f"the response to request {request.id}") from None
            raise
        wall_ms = (time.perf_counter() - t0) * 1e3
        value = metric_value(proto["metric"], response)
        sha = self.writer.store_response(response.data)
        record = {
            "seq": seq, "arm": arm["id"], "role": arm["role"], "phase": phase, "index": index,
            "group": group, "block": block, "prompt_id": prompt["id"], "metric": proto["metric"],
            "value": value, "response_sha256": sha, "response_len": len(response.data),
            "response_tokens": response.tokens,
            "prompt_tokens": response.prompt_tokens,
            "generated_tokens": response.generated_tokens,
            "prefill_ms": response.prefill_ms, "decode_ms": response.decode_ms,
            "cache_hits": response.cache_hits, "band_widths": response.band_widths,
            "timing_source": response.timing_source,
            "response_source": response.response_source,
            "weight_bytes": response.weight_bytes, "wall_ms": round(wall_ms, 6),
            "worker_ms": _number_or_none(response.timings.get("worker_ms")),
            "t_start_utc": t_start, "ok": True, "error": None,
        }
        if response.token_texts is not None:  # names the first differing token (token_diff.py)
            record["response_token_texts"] = response.token_texts
        failure = None
        if proto["cache"] == "cold" and (response.cache_hits or 0) > 0:
            failure = (f"arm {arm['id']}: request {request.id} hit the engine cache "
                       f"({response.cache_hits} hits) but the protocol requires cache-cold "
                       f"requests (measure.cache = \"cold\")")
        elif not value > 0:
            failure = (f"arm {arm['id']}: request {request.id} has no usable "
                       f"{proto['metric']} (prefill_ms={response.prefill_ms}, "
                       f"decode_ms={response.decode_ms})")
        if failure:
            record.update(ok=False, error=failure)
        self.writer.append_jsonl("samples.jsonl", record)
        self.samples.append(record)
        if failure:
            raise RunFailed(failure)
        key = f"{arm['id']}/{group}"
        median = None
        if phase == "measured":
            self._measured.setdefault(key, []).append(value)
            median = statistics.median(self._measured[key])
        self._event("request", arm, phase=phase, index=index + 1, total=total, value=value,
                    median=median, group=group)

    def _event(self, kind: str, arm: dict, **kw: Any) -> None:
        self.on_event(Event(kind=kind, arm=arm["id"], label=arm["label"],
                            metric=self.protocol["metric"], **kw))
