"""One concurrency rung on vLLM's scheduler: `c` agents in a closed loop, as `oomkit ladder` runs
a rung (each agent sends its session's steps in order; a step is sent when the previous one has
answered). A synthetic executor stands in for the model: every request whose prompt is computed
gets one token per step. Time is virtual: each step lasts what the step-time model prices.

With DP the rung runs one vLLM scheduler per engine (forecast.lanes) behind vLLM's DP router
(forecast.router); the events of all engines are taken in time order."""

from __future__ import annotations

import heapq
import math
import time
from array import array
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from oomkit.forecast.counts import percentile_of_counts
from oomkit.forecast.engine import Engine, runner_output
from oomkit.forecast.heap import PacedCollection, paced_collection
from oomkit.forecast.lanes import Lane, group_clock, groups_of, runnable, wake
from oomkit.forecast.minutes import MinuteTally
from oomkit.forecast.result import RungForecast, regime_of
from oomkit.forecast.router import DpRouter
from oomkit.forecast.scrape import GaugeScrapes
from oomkit.forecast.steptime import StepLoad, StepTimeModel
from oomkit.forecast.tokens import SessionTokens, session_tokens
from oomkit.forecast.traffic import AgentStep, Traffic
from oomkit.loadrun.stats import percentile

SLO_SHARE = 0.95  # as the ladder: a rung breaches its SLOs when fewer than 95% of requests meet them


@dataclass
class Budget:
    """Limits shared by every rung of a forecast: steps and wall seconds. Never a hang."""

    max_steps: int
    deadline_monotonic: float
    steps: int = 0

    def spent(self) -> str | None:
        if self.steps >= self.max_steps:
            return f"step limit ({self.max_steps:,} steps) reached"
        if time.monotonic() >= self.deadline_monotonic:
            return "time limit reached"
        return None


@dataclass
class _Track:
    agent: int
    lane: int
    sent_s: float
    request: Any
    first_s: float | None = None
    last_s: float = 0.0
    delivery_s: float = 0.0  # its trip's share that grows with the requests in its engine (forecast.delivery)


@dataclass
class _Tally:
    requests: int = 0
    errors: int = 0
    preemptions: int = 0
    output_tokens: int = 0
    max_kv_usage: float = 0.0
    waiting_max: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0
    slo_met: int = 0
    ttft_ms: array[float] = field(default_factory=lambda: array("d"))
    latency_ms: array[float] = field(default_factory=lambda: array("d"))
    itl_ms: Counter[float] = field(default_factory=Counter)
    """Each inter-token latency and how many tokens had it (forecast.counts: a few MB, not 64)."""
    errors_by_kind: dict[str, int] = field(default_factory=dict)


@dataclass
class Rung:
    """The state of one rung while it runs."""

    lanes: list[Lane]
    router: DpRouter
    lockstep: bool
    traffic: Traffic
    model: StepTimeModel
    head: array[int]
    concurrency: int
    steps_per_session: int
    slos: dict[str, float]
    now_s: float
    spread_s: float = 0.0
    """Session starts spread evenly over this many seconds (--window); 0: all start at once."""
    agents: list[SessionTokens] = field(default_factory=list)
    next_step: list[int] = field(default_factory=list)
    arrivals: list[tuple[float, int, int]] = field(default_factory=list)  # (client send time, seq, agent)
    live: dict[str, _Track] = field(default_factory=dict)
    tally: _Tally = field(default_factory=_Tally)
    seq: int = 0
    api_free_s: float = 0.0
    steps: int = 0
    stop_note: str | None = None
    scrapes: GaugeScrapes | None = None
    """What a once-a-second /metrics scraper reads of the KV usage gauge during the rung."""
    minutes: MinuteTally | None = None
    """Figures per minute of the window, for sessions spread over one (`spread_s` > 0)."""

    @property
    def engine(self) -> Engine:
        return self.lanes[0].engine

    def run(self, budget: Budget, label: str) -> RungForecast:
        wall0, start_s = time.monotonic(), self.now_s
        for lane in self.lanes:  # one clock for all rungs, as one deployment's
            lane.clock_s = max(lane.clock_s, self.now_s)
        self.scrapes = GaugeScrapes.opened(self.now_s, self._gauge())
        self.minutes = MinuteTally(self.now_s) if self.spread_s > 0 else None
        for i in range(self.concurrency):
            self.agents.append(session_tokens(self.traffic, i, self.head))
            self.next_step.append(0)
            self._send(i, self.now_s + i * self.spread_s / self.concurrency)
        with paced_collection() as pace:
            self._loop(budget, label, pace)
        if self.stop_note:
            self._abort_live()
        else:
            self._fail_stalled()
        self.now_s = max([self.now_s, *(lane.clock_s for lane in self.lanes)])
        return self._result(time.monotonic() - wall0, self.now_s - start_s)

    def _loop(self, budget: Budget, label: str, pace: PacedCollection) -> None:
        """Arrivals and steps in time order until nothing is left, or the budget is spent."""
        groups = groups_of(self.lanes, self.lockstep)
        while True:
            self.stop_note = budget.spent()
            if self.stop_note:
                return
            ready = [g for g in groups if runnable(g)]
            group = min(ready, key=group_clock) if ready else None
            t_step = group_clock(group) if group else math.inf
            t_arrival = self._next_arrival_s() if self.arrivals else math.inf
            if t_arrival == math.inf and group is None:
                return
            # What arrived by a step boundary joins at it, as in the engine's loop.
            if t_arrival <= t_step:
                self._arrive(label, groups)
            elif self._step(group or [], t_step):
                budget.steps += 1
                pace.step()
            else:
                for lane in group or []:
                    lane.parked = True  # scheduled nothing: only a new request can change that

    def _send(self, agent: int, at_s: float) -> None:
        heapq.heappush(self.arrivals, (at_s, self.seq, agent))
        self.seq += 1

    def _next_arrival_s(self) -> float:
        # HTTP, chat template and tokenization happen outside the engine, one request at a time in
        # the API server's process: requests sent together reach the scheduler staggered.
        return max(self.arrivals[0][0], self.api_free_s) + self.model.request_overhead_s

    def _arrive(self, label: str, groups: list[list[Lane]]) -> None:
        """The next request leaves the API server: refused, or routed to an engine's queue."""
        api, st = self.engine.api, self.engine.settings
        arrived_s = self.api_free_s = self._next_arrival_s()
        sent_s, _, agent = heapq.heappop(self.arrivals)
        k = self.next_step[agent]
        prompt, step = self._request(agent, k)
        if len(prompt) >= st.max_model_len:  # vLLM's API rejects it (renderers/params.py, HTTP 400)
            self._error(agent, "context_length")
            return
        max_tokens = min(step.output_tokens, st.max_model_len - len(prompt))  # get_max_tokens clamps
        params = api.sampling.SamplingParams(max_tokens=max(1, max_tokens), ignore_eos=True)
        req_id = f"{label}-a{agent}-s{k}-{self.seq}"
        request = api.request.Request(
            req_id, prompt, params, None, arrival_time=arrived_s, block_hasher=self.engine.block_hasher
        )
        i = self.router.route(arrived_s, lambda n: self.lanes[n].counts_at(arrived_s))
        lane = self.lanes[i]
        waiting, running, _ = lane.counts_at(arrived_s)
        delivery_s = self.model.delivery_s_per_running * (waiting + running + len(lane.pending))
        wake(next(g for g in groups if lane in g), arrived_s)
        lane.pending.append(request)
        self.live[req_id] = _Track(agent, i, sent_s, request, delivery_s=delivery_s)
        self.seq += 1

    def _request(self, agent: int, k: int) -> tuple[list[int], AgentStep]:
        """The prompt (token ids) and step of the agent's k-th request: its session's step k."""
        tokens = self.agents[agent]
        return tokens.prompt(k), tokens.shape.steps[k]

    def _step(self, group: list[Lane], start_s: float) -> bool:
        """One step of a lane, or of all lanes in lockstep: it lasts as long as the slowest."""
        outs: list[Any] = []
        loads: list[StepLoad] = []
        for lane in group:
            lane.join_pending()
            out = None if lane.idle() else lane.scheduler.schedule()
            outs.append(out)
            if out is not None and out.num_scheduled_tokens:
                loads.append(self._load(lane, out.num_scheduled_tokens))
        if not loads:
            for lane, out in zip(group, outs, strict=True):
                if out is not None:
                    lane.scheduler.update_from_output(out, self._runner_output(lane, []))  # vLLM's bookkeeping
            return False
        self.now_s = end_s = start_s + self.model.group_step_s(loads)
        new_tokens = 0
        for lane, out in zip(group, outs, strict=True):
            lane.after, lane.step_end_s, lane.clock_s = lane.before, end_s, end_s
            if out is None:
                continue  # idle in lockstep: its clock moves with the group's, its counts do not change
            outputs = lane.scheduler.update_from_output(out, self._runner_output(lane, list(out.num_scheduled_tokens)))
            for eco in outputs.values():
                for o in eco.outputs:
                    new_tokens += self._token(o.request_id, len(o.new_token_ids), o.finish_reason is not None)
                if eco.scheduler_stats is not None:
                    self._stats(lane, eco.scheduler_stats)
            lane.after = lane.counts()
        waiting = sum(lane.waiting for lane in self.lanes)
        self.tally.waiting_max = max(self.tally.waiting_max, waiting)
        self.tally.output_tokens += new_tokens
        if self.minutes is not None:
            if new_tokens:  # every token of a step has the step's end time: one bucket, counted once
                self.minutes.tokens(end_s, new_tokens)
            self.minutes.step(end_s, self._gauge(), waiting, 0, 0)
        self.steps += 1
        return True

    def _runner_output(self, lane: Lane, ids: list[str]) -> Any:
        return runner_output(self.engine, lane.scheduler, ids)

    def _load(self, lane: Lane, scheduled: dict[str, int]) -> StepLoad:
        requests = lane.scheduler.requests
        windows = self.model.windows
        decode = prefill = context = pairs = 0
        capped = [0] * len(windows)
        for req_id, n in scheduled.items():
            ctx = requests[req_id].num_computed_tokens  # already advanced by schedule()
            context += ctx
            pairs += n * (ctx - n // 2)
            if n == 1:
                decode += 1
            else:
                prefill += n
            for w, win in enumerate(windows):
                capped[w] += min(ctx, win)
        return StepLoad(decode, prefill, context, pairs, tuple(capped))

    def _token(self, req_id: str, new: int, finished: bool) -> int:
        """A request's output of this step; the new tokens it counts (the caller adds them up)."""
        tr = self.live.get(req_id)
        if tr is None or not new and not finished:
            return 0
        t = self.now_s
        if new:
            if tr.first_s is None:
                tr.first_s = t
            else:
                self.tally.itl_ms[(t - tr.last_s) * 1000] += 1
            tr.last_s = t
        if finished:
            self._finish(req_id, tr)
        return new

    def _finish(self, req_id: str, tr: _Track) -> None:
        del self.live[req_id]
        self.router.finished(tr.lane)
        tally, first = self.tally, tr.first_s if tr.first_s is not None else self.now_s
        tally.requests += 1
        tally.preemptions += tr.request.num_preemptions
        # The trip's growing share shifts the whole answer as the client sees it, so the agent's
        # next step is sent that much later too; the token gaps do not change.
        answered_s = self.now_s + tr.delivery_s
        ttft_ms, latency_ms = (first + tr.delivery_s - tr.sent_s) * 1000, (answered_s - tr.sent_s) * 1000
        tally.ttft_ms.append(ttft_ms)
        tally.latency_ms.append(latency_ms)
        tally.slo_met += _meets(self.slos, ttft_ms, latency_ms, tr.request.num_output_tokens)
        if self.minutes is not None:
            self.minutes.finished(self.now_s, ttft_ms, latency_ms, tr.request.num_preemptions)
        self.next_step[tr.agent] += 1
        if self.next_step[tr.agent] < self.steps_per_session:
            self._send(tr.agent, answered_s)
        else:
            self.agents[tr.agent].release()

    def _error(self, agent: int, kind: str) -> None:
        # As in a ladder rung, a failed request ends its session.
        self.agents[agent].release()
        self.tally.requests += 1
        self.tally.errors += 1
        self.tally.errors_by_kind[kind] = self.tally.errors_by_kind.get(kind, 0) + 1
        if self.minutes is not None:
            self.minutes.failed(self.now_s)

    def _stats(self, lane: Lane, stats: Any) -> None:
        tally, usage = self.tally, float(stats.kv_cache_usage)
        if self.scrapes is not None and self.scrapes.due(self.now_s):
            self.scrapes.read_until(self.now_s, self._gauge())  # before this step's value is set
        lane.kv_usage = usage
        tally.max_kv_usage = max(tally.max_kv_usage, usage)  # the fullest engine's
        lane.waiting = int(stats.num_waiting_reqs) + int(stats.num_skipped_waiting_reqs)
        pcs = stats.prefix_cache_stats
        tally.prefix_queries += int(pcs.queries)
        tally.prefix_hits += int(pcs.hits)
        if self.minutes is not None:
            self.minutes.step(self.now_s, usage, 0, int(pcs.queries), int(pcs.hits))

    def _gauge(self) -> float:
        """The fullest engine's KV usage gauge now (vLLM's /metrics has one per engine)."""
        return max(lane.kv_usage for lane in self.lanes)

    def _fail_stalled(self) -> None:
        """vLLM scheduled nothing and nothing will arrive: what waits can never be admitted."""
        stuck = list(self.live)
        if not stuck:
            return
        self._abort(stuck)
        for req_id in stuck:
            self._error(self.live.pop(req_id).agent, "not_admitted")
        self.stop_note = f"{len(stuck)} request(s) could never be admitted: the KV pool cannot hold them"

    def _abort_live(self) -> None:
        self._abort(list(self.live))
        self.live.clear()
        self.arrivals.clear()

    def _abort(self, ids: list[str]) -> None:
        status = self.engine.api.request.RequestStatus.FINISHED_ABORTED
        for lane in self.lanes:
            lane.pending.clear()
            mine = [i for i in ids if self.live[i].lane == lane.index]
            if mine:
                lane.scheduler.finish_requests(mine, status)
        for i in ids:
            self.router.finished(self.live[i].lane)

    def _result(self, wall_s: float, simulated_s: float) -> RungForecast:
        t = self.tally
        verdict = _verdict(t, self.slos, cut=self.stop_note is not None and not t.errors)
        notes = (self.stop_note,) if self.stop_note else ()
        sampled = self.scrapes.closed(self.now_s, self._gauge()) if self.scrapes else t.max_kv_usage
        return RungForecast(
            concurrency=self.concurrency,
            verdict=verdict,
            regime=regime_of(t.requests, t.errors, t.preemptions, t.waiting_max),
            requests=t.requests,
            errors=t.errors,
            preemptions=t.preemptions,
            max_kv_usage=t.max_kv_usage,
            max_kv_usage_sampled=sampled,
            waiting_max=t.waiting_max,
            prefix_hit_rate=t.prefix_hits / t.prefix_queries if t.prefix_queries else None,
            ttft_ms_p50=percentile(t.ttft_ms, 50),
            ttft_ms_p95=percentile(t.ttft_ms, 95),
            itl_ms_p50=percentile_of_counts(t.itl_ms, 50),
            itl_ms_p95=percentile_of_counts(t.itl_ms, 95),
            latency_ms_p50=percentile(t.latency_ms, 50),
            latency_ms_p95=percentile(t.latency_ms, 95),
            output_tokens_per_s=t.output_tokens / simulated_s if simulated_s > 0 else None,
            slo_attainment=t.slo_met / t.requests if self.slos and t.requests else None,
            simulated_s=simulated_s,
            steps=self.steps,
            wall_s=wall_s,
            errors_by_kind=dict(t.errors_by_kind),
            notes=notes,
            minutes=self.minutes.results() if self.minutes is not None else (),
        )


def _meets(slos: dict[str, float], ttft_ms: float, latency_ms: float, output_tokens: int) -> bool:
    tpot = (latency_ms - ttft_ms) / (output_tokens - 1) if output_tokens > 1 else None
    values = {"ttft_ms": ttft_ms, "latency_ms": latency_ms, "tpot_ms": tpot}
    return all(values[k] is None or values[k] <= bound for k, bound in slos.items())  # type: ignore[operator]


def _verdict(t: _Tally, slos: dict[str, float], cut: bool) -> str:
    if t.errors:
        return "failure"
    if cut:
        return "cut"
    if t.preemptions:
        return "preemption"
    if slos and t.requests and t.slo_met / t.requests < SLO_SHARE:
        return "slo"
    return "ok"
