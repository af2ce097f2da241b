"""The triage state machine: feed records in log order, ask for the result at any time. The same
object serves a finished log (`analyse`) and a live one (`oomkit launch` follows server.log)."""

from __future__ import annotations

import re
from dataclasses import replace

from oomkit.logs import Record
from oomkit.triage.facts import FactCollector
from oomkit.triage.failures import FAILURE_GATE, FAILURES
from oomkit.triage.failures_added import CUT_TRACEBACK, ITERATION_CANCEL
from oomkit.triage.frames import (
    CAPTURE_STEP,
    FAULT_FRAME,
    FAULT_HEADER,
    FRAME,
    FRAME_HEAD,
    FRAME_TAIL,
    ITERATION_WAIT_FRAME,
    MODEL_RUN_FRAME,
    RAISE_LINE,
    REPLY_WAIT_CALL,
    REPLY_WAIT_CALLER,
    RPC_CALL,
    SERVING_MESSAGE,
    STARTED_ENGINE,
    STEP_CALL,
    WORKER_ANSWERED,
    batch_step_kind,
    dumped,
    is_serving_frame,
)
from oomkit.triage.knowledge_rules import template_failure
from oomkit.triage.markers import MARKER_GATE, MARKERS, READY_TIMEOUT_S, RESTART_MARKERS, SHUTDOWN, SLOW_STEP
from oomkit.triage.model import Evidence, TimelineEntry
from oomkit.triage.not_failures import BENIGN_SOURCES, FALLBACK_LINES, REQUEST_SOURCES, SELF_KILL
from oomkit.triage.prefilter import LIVE_KEY
from oomkit.triage.rules import TIMELINE, Failure
from oomkit.triage.stack import request_only, stack_phase, step_kind
from oomkit.triage.state import Hit, State

MAX_FRAMES = 80
TRACEBACK_HEADER = "Traceback (most recent call last)"
IPYTHON_HEADER = re.compile(r"\s*[\w.]+\s+Traceback \(most recent call last\)\s*$")
WORKER_METHOD = re.compile(r"while processing method (?P<m>\w+)|Error executing method '?(?P<m2>\w+)'?")
# The last start-up lines before the API server: every memory step (weights, profile, KV cache,
# graphs) is behind the engine once one of them is printed.
ENGINE_WARM = re.compile(
    r"^(?:Graph capturing finished in|init engine \(profile, create kv cache, warmup model\) took"
    # V1's advice on --kv-cache-memory, logged once capture_model has returned (vllm/v1/worker/gpu_worker.py
    # compile_or_warm_up_model, 0.10.2-0.34; vllm-ascend's worker.py alike); not the start-up check's refusal, "Free
    # memory on device (...) on startup is less than desired GPU memory utilization"
    r"|Free memory on device \([^)]*\) on startup\. Desired GPU memory utilization is)"
)
# Stats lines are the most frequent marker line; no other marker matches them, so trying them first
# changes no result.
MARKER_ORDER = sorted(MARKERS, key=lambda m: m.id != "R-SERVE")
DUMP = next(rule for rule in FAILURES if rule.id == "E-DUMP")
WRAPPER = re.compile("|".join(f.pattern.pattern for f in FAILURES if f.cls in ("wrapper", "died")))
# V1's multiproc executor re-raises a worker's failure with the worker's exception quoted in it
# (vllm/v1/executor/multiproc_executor.py, 0.30+: "Worker failed with error '{result}', please check the stack trace
# above for the root cause"): the line carries the exception itself, whatever the excerpt cut above it.
WORKER_ERROR_QUOTED = re.compile(r"Worker failed with error '.")
MAX_HITS_PER_RULE = 8
# V0's API server waiting for its engine's output (E-MQWAIT): a stall only before the ready line and with no failure
# line after it.
CLIENT_WAIT = "E-MQWAIT"
# Hits that leave a log without a failure of its own (a full cache, a request the API server answered with an error):
# a traceback cut after them is still all the log says of what failed.
QUIET_CLASSES = ("pressure", "http")


class Triage:
    """Incremental triage. `feed` returns the timeline entries a record newly reached."""

    def __init__(self) -> None:
        self.state = State()
        self.facts = FactCollector()
        self.starts = 1
        self.records = 0

    def feed(self, rec: Record, prefiltered: bool = False) -> list[TimelineEntry]:
        """`prefiltered`: the caller already kept only lines the key matches (the block scan)."""
        self.records += 1
        if not prefiltered and not LIVE_KEY.search(rec.raw):
            return []
        if self.facts.feed_stats(rec):  # the most frequent candidate: nothing but a serving sample
            return self._marker(rec)
        self.facts.feed(rec)
        new = self._marker(rec) if MARKER_GATE.search(rec.msg) else []
        self._frame(rec)
        # V1 dumps a step's input only when EngineCore's step raised (execute_model's error logging): it was serving
        if SERVING_MESSAGE.search(rec.msg) or dumped(rec.level, rec.src):
            self.state.serving_message = True
        if "SchedulerOutput(" in rec.msg and (kind := batch_step_kind(rec.msg)):
            self.state.batch = kind
        # IPython's traceback header names the exception class the last line will print
        # ("OutOfMemoryError    Traceback (most recent call last)"), before any frame: not the failure yet.
        if FAILURE_GATE.search(rec.msg) and not IPYTHON_HEADER.match(rec.msg):
            self._failures(rec)
        elif dumped(rec.level, rec.src) and self.state.shutdown is None:
            self._hit(DUMP, rec)  # a line of V1's failed-step dump that no rule reads by its words
        return new

    # -- markers -------------------------------------------------------------------------
    def _marker(self, rec: Record) -> list[TimelineEntry]:
        st = self.state
        if SHUTDOWN.search(rec.msg) and st.shutdown is None:
            st.shutdown = Evidence(rec.file, rec.line, rec.text)
        marker = next((m for m in MARKER_ORDER if m.pattern.search(rec.msg)), None)
        if marker is None:
            return []
        self._drop_stalls()  # the log went on: a wait before this line ended
        if ENGINE_WARM.search(rec.msg):
            st.engine_warm = Evidence(rec.file, rec.line, rec.text)
        st.open_traceback = None  # the log went on: whatever ended that traceback was not cut off
        if marker.id in RESTART_MARKERS and (st.ready or st.shutdown is not None):
            self.state = st = State()  # a new start in the same log: judge the last one
            self.starts += 1
        index = TIMELINE.index(marker.phase)
        if index >= st.stage:
            st.after = marker.after
        if marker.phase in ("ready", "serving"):
            st.ready = True
        self._slow_step(rec)
        for hit in st.hits.values():  # errors printed before any marker: the next marker tells where the log was
            if hit.context_source == "none":
                hit.context_phase, hit.context_source = marker.phase, "nearby"
        if index <= st.stage:
            return []
        st.stage = index
        entry = TimelineEntry(marker.phase, rec.file, rec.line, rec.time)
        st.timeline.append(entry)
        return [entry]

    def _drop_stalls(self) -> None:
        """A wait the log got past (a placement group created in the end, a stats line after a worker
        hang warning) is no failure."""
        self.state.drop_hits([rid for rid, hit in self.state.hits.items() if hit.rule.cls == "stall"])

    def _slow_step(self, rec: Record) -> None:
        m = SLOW_STEP.search(rec.msg)
        if m and float(m.group("s")) > READY_TIMEOUT_S and not self.state.ready:
            self.state.slow = Evidence(rec.file, rec.line, rec.text)

    # -- traceback frames -----------------------------------------------------------------
    def _frame(self, rec: Record) -> None:
        method = WORKER_METHOD.search(rec.msg)
        if method:  # V0's wrappers name the method the worker ran: the outermost frame of its traceback
            self.state.methods[rec.pid] = f"worker::{method.group('m') or method.group('m2')}"
        frames = self.state.frames
        if TRACEBACK_HEADER in rec.msg or FAULT_HEADER.search(rec.msg):
            frames[rec.pid] = []
            self.state.frames_from[rec.pid] = (rec.file, rec.line)
            self.state.raised.pop(rec.pid, None)
            if rec.src and BENIGN_SOURCES.search(rec.src) and REQUEST_SOURCES.search(rec.src):
                # the API server's request handler logging one request's traceback (logger.exception): that
                # request failed, not the engine, even where the excerpt cuts the traceback
                self.state.request_error = self.state.request_error or Evidence(rec.file, rec.line, rec.text)
                return
            self.state.open_traceback = (Evidence(rec.file, rec.line, rec.text), rec.pid)
            return
        if fault := FAULT_FRAME.search(rec.msg):  # innermost first: each frame is the caller of the ones above
            self._push_frame(rec, rec.pid, fault.group("path"), fault.group("func"), outer=True)
            return
        m = FRAME.search(rec.msg)
        wrapped, self.state.wrapped_frame = self.state.wrapped_frame, None
        if m:
            path, func = m.group("path"), m.group("func")
            if m.group("cpath"):  # a condensed frame ("file.py:12, in func")
                path, func = m.group("cpath"), m.group("cfunc")
            elif path is None:  # IPython's form names Class.method: the method is what the tables know
                path, func = m.group("ipath"), func.rsplit(".", 1)[-1]
            self._push_frame(rec, rec.pid, path, func)
        elif head := FRAME_HEAD.search(rec.msg):
            self.state.wrapped_frame = (rec.file, rec.line, rec.pid, head.group("path"))
        elif wrapped and (rec.file, rec.line) == (wrapped[0], wrapped[1] + 1) and (tail := FRAME_TAIL.match(rec.msg)):
            # The wrapped line's rest carries no log prefix: the frame is the process's whose line it continues.
            self._push_frame(rec, wrapped[2], wrapped[3] + tail.group("rest"), tail.group("func"))
        elif (call := RPC_CALL.search(rec.msg)) and (frames.get(rec.pid) or self.state.open_traceback is None):
            # A frame's source line that calls the workers by a method's name: that method is the next step in. An
            # excerpt may start on that line, before any frame of its traceback: it is the outermost frame read.
            self._push_frame(rec, rec.pid, "rpc", call.group("method"))
        elif (stack := frames.get(rec.pid)) and REPLY_WAIT_CALLER.search(stack[-1]) and REPLY_WAIT_CALL.search(rec.msg):
            # The executor's call of its reply wait: the frame it would push next, for an excerpt cut here.
            stack.append(f"{stack[-1].rsplit('::', 1)[0]}::get_response")
        elif frames.get(rec.pid) and (step := STEP_CALL.search(rec.msg)):
            # the next frame's step, for a cut traceback
            frames[rec.pid].append(f"call::{step.group('func') or CAPTURE_STEP}")
        elif frames.get(rec.pid) and (raised := RAISE_LINE.match(rec.msg)):
            message = f"{raised.group('exc')}: {raised.group('text')}"
            self.state.raised[rec.pid] = replace(rec, msg=message)

    def _push_frame(self, rec: Record, pid: int | None, path: str, func: str, outer: bool = False) -> None:
        """`outer`: the frame calls those already read (faulthandler's order), so it goes first."""
        frames = self.state.frames
        self.state.drop_hits([CLIENT_WAIT])  # a traceback after the wait (header or exception maybe cut): it failed
        if self.state.open_traceback is None and self.state.frames_only is None and pid not in frames:
            # Frames with no header before them: an excerpt that starts inside a traceback.
            self.state.frames_only = (Evidence(rec.file, rec.line, rec.text), pid)
        self.state.raised.pop(pid, None)  # a deeper frame: the raise above it was not the innermost
        stack = frames.setdefault(pid, [])
        stack.insert(0 if outer else len(stack), f"{path}::{func}")
        del stack[:-MAX_FRAMES]

    def _stack(self, pid: int | None) -> list[str]:
        """The process's frames, or those of lines without a process prefix."""
        return self.state.frames.get(pid) or self.state.frames.get(None) or []

    def _frames_phase(self, pid: int | None, memory: bool = False, msg: str = "", answered: bool = False) -> str | None:
        """`memory`: the failure is a memory error, which an installation frame does not place; `msg`: the
        failure line (a worker's answer ends the wait the frames stop in); `answered`: another failure line of
        the same process is that answer."""
        stack = self._stack(pid)
        method = self.state.methods.get(pid) or self.state.methods.get(None)
        stack = [method, *stack] if method else stack
        return stack_phase(stack, memory, answered or bool(WORKER_ANSWERED.search(msg)))

    # -- failures -------------------------------------------------------------------------
    def _failures(self, rec: Record) -> None:
        st = self.state
        if FALLBACK_LINES.search(rec.msg):
            return  # vLLM logs it and goes on with another path
        benign = bool(rec.src and BENIGN_SOURCES.search(rec.src))
        if benign and st.request_error is None and REQUEST_SOURCES.search(rec.src or ""):
            # matched by a rule, not by its level: the prefilter lets through only lines a rule can match
            if any(rule.pattern.search(rec.msg) for rule in FAILURES):
                st.request_error = Evidence(rec.file, rec.line, rec.text)
        matched: list[Failure] = []
        for rule in FAILURES:
            if rule.rank < 50 and (benign or st.shutdown is not None) and rule.cls != "pressure":
                continue
            if rule.id == CLIENT_WAIT and st.ready:
                continue  # after the ready line the client's wait for output is an idle server
            if rule.id == "E-KILLED" and "E-FATALSIG" in st.hits and SELF_KILL.search(rec.msg):
                continue  # vLLM's own kill of its process tree after a worker failed, not the OOM killer
            if rule.pattern.search(rec.msg):
                matched.append(rule)
        if all(rule.cls in ("exception", "wrapper") for rule in matched) and (known := template_failure(rec.msg)):
            matched.append(known)  # a memory error no hand rule names, known from vLLM's source
        if ITERATION_CANCEL.pattern.match(rec.msg) and st.shutdown is None and self._in_iteration_wait(rec.pid):
            matched.append(ITERATION_CANCEL)
        excluded = {x for rule in matched for x in rule.excludes}
        if matched:
            st.open_traceback = None
        for rule in matched:
            if rule.id in excluded:
                continue
            if rule.cls == "exception" and (not WRAPPER.search(rec.msg) or WORKER_ERROR_QUOTED.search(rec.msg)):
                st.last_exception = Evidence(rec.file, rec.line, rec.text)
            self._hit(rule, rec)

    def _in_iteration_wait(self, pid: int | None) -> bool:
        """The traceback's innermost vLLM frame is V0's engine loop, with only asyncio's frames below it."""
        stack = self._stack(pid)
        inner = next((i for i in range(len(stack) - 1, -1, -1) if "/vllm/" in stack[i]), None)
        return (
            inner is not None
            and bool(ITERATION_WAIT_FRAME.search(stack[inner]))
            and all("asyncio/" in frame for frame in stack[inner + 1 :])
        )

    def _hit(self, rule: Failure, rec: Record) -> None:
        st = self.state
        if rule.cls != "stall":
            st.drop_hits([CLIENT_WAIT])  # the engine's own failure line ended the client's wait
        old = st.hits.get(rule.id)
        if old is not None:
            old.count += rec.repeat
            return
        phase, source = self._context(rec, rule.is_oom)
        st.hits[rule.id] = Hit(
            rule,
            Evidence(rec.file, rec.line, rec.text),
            phase,
            source,
            st.ready,
            self._prefill_hint(rec.pid, rec.msg),
            rec.pid,
            rec.repeat,
        )
        st.order.append(rule.id)

    def _serving_elsewhere(self) -> str | None:
        """The phase "serving" when another process's traceback is on the serving path (the API server's
        output handler got the dead core's error): the server had started, whatever the cut traceback was."""
        stacks = self.state.frames.values()
        serving = any(is_serving_frame(f) for stack in stacks for f in stack)
        return "serving" if serving else None

    def _context(self, rec: Record, memory: bool = False) -> tuple[str | None, str]:
        framed = self._frames_phase(rec.pid, memory, rec.msg)
        if framed and framed != "serving":
            return framed, "frames"
        # start-up was over, whichever start-up marker the excerpt kept last (V1 dumps a step's input only from
        # EngineCore's step)
        if STARTED_ENGINE.search(rec.msg) or dumped(rec.level, rec.src):
            return "serving", "message"
        if framed in (None, "serving") and request_only(self._stack(rec.pid)):
            return "serving", "frames"
        if self.state.after is not None:
            return self._marker_phase(rec.pid), "markers"
        if framed == "serving":
            return "serving", "frames"
        if SERVING_MESSAGE.search(rec.msg) or self.state.serving_message:
            return "serving", "message"
        return None, "none"

    def _marker_phase(self, pid: int | None) -> str | None:
        """The last marker's phase; once the KV pool is sized, a traceback that runs the model is the warm-up and
        capture that follow (allocating the pool runs no forward pass)."""
        after = self.state.after
        if after == "kv_cache_allocation":
            stack = self._stack(pid)
            if any(MODEL_RUN_FRAME.search(frame) for frame in stack):
                return "cudagraph_capture"
        return after

    def _prefill_hint(self, pid: int | None, msg: str) -> str | None:
        return step_kind(self._stack(pid), msg, self.state.batch, self.facts.stats.last)

    def hits(self) -> list[Hit]:
        """Failures in order. A wrapper line ("WorkerProc hit an exception") comes before its
        traceback, so its frames are read now, at the end."""
        self._read_cut_raise()
        hits = [self.state.hits[i] for i in self.state.order]
        # A wrapper printed before the traceback ("EngineCore encountered a fatal error") shares its frames with the
        # exception line under them: when that line is a worker's answer, the wait the frames end in did not time out.
        answered = {h.pid for h in hits if WORKER_ANSWERED.search(h.evidence.text)}
        for h in hits:
            if h.rule.cls == "wrapper" and (h.context_source != "frames" or self._traceback_after(h)):
                # placed by the method it names alone when its line was read: the traceback after it (V0's
                # "Exception in worker ... while processing method M", then M's stack) places it better
                framed = self._frames_phase(h.pid, msg=h.evidence.text, answered=h.pid in answered)
                framed = framed or self._elsewhere_phase(h.pid)
                if framed and (framed != "serving" or h.context_phase is None):
                    h.context_phase, h.context_source = framed, "frames"
                    h.prefill_hint = h.prefill_hint or self._prefill_hint(h.pid, "")
            elif (h.context_source == "none" and h.rule.cls in ("exception", "crash")) or (
                h.rule.cls == "oom" and h.context_source in ("none", "markers", "nearby") and self._traceback_after(h)
            ):
                # A failure line that nothing placed, followed by a stack of its process: a chained exception's outer
                # traceback ("The above exception was the direct cause of the following"), whose frames are the
                # callers the inner one was raised under; faulthandler's dump under "Fatal Python error: ...". An OOM
                # line an extension prints before Python's traceback of its call (vLLM's cumem_allocator.cpp) counts
                # only with frames of its own process: another's traceback is another step.
                framed = self._frames_phase(h.pid, memory=h.rule.is_oom, msg=h.evidence.text)
                if framed:
                    h.context_phase, h.context_source = framed, "frames"
        cut = self._cut_traceback(hits)
        return hits + [cut] if cut else hits

    def _traceback_after(self, hit: Hit) -> bool:
        """A traceback of the hit's own process starts after its line: the Python stack of the call that failed."""
        start = self.state.frames_from.get(hit.pid)
        return start is not None and start[0] == hit.evidence.file and start[1] > hit.evidence.line

    def _elsewhere_phase(self, pid: int | None) -> str | None:
        """A wrapper whose own process's frames place nothing ("Engine core initialization failed. See root
        cause above", a line that lost its process prefix) reports another process's failure: the start-up
        step that the other processes' tracebacks agree on, if they name exactly one."""
        phases = {self._frames_phase(other) for other in self.state.frames if other != pid}
        phases.discard(None)
        return phases.pop() if len(phases) == 1 else None

    def _read_cut_raise(self) -> None:
        """A traceback cut before its exception line whose innermost frame raises with a literal message: the
        failure rules read that message as the exception line (once, when nothing else failed)."""
        st = self.state
        cut = st.open_traceback or st.frames_only
        if cut is None or st.raise_read or st.shutdown is not None or (record := st.raised.get(cut[1])) is None:
            return
        st.raise_read = True
        if any(h.rule.cls not in QUIET_CLASSES for h in st.hits.values()):
            return
        before = set(st.hits)
        self._failures(record)
        for rule_id in [rid for rid in st.hits if rid not in before]:
            hit = st.hits[rule_id]
            if hit.rule.rank < 50 or hit.rule.cls in ("exception", "wrapper"):  # a class name says nothing
                del st.hits[rule_id]
                st.order.remove(rule_id)
            else:
                hit.from_raise = True

    def _cut_traceback(self, hits: list[Hit]) -> Hit | None:
        """The log ends inside a traceback and nothing else failed: the frames are all there is."""
        st = self.state
        cut = st.open_traceback or st.frames_only
        if cut is None or st.shutdown is not None or any(h.rule.cls not in QUIET_CLASSES for h in hits):
            return None
        evidence, pid = cut
        answered = st.request_error
        if answered is not None and answered.file == evidence.file and answered.line >= evidence.line:
            return None  # the traceback ended in the API server's exception for one request: that request failed
        framed = self._frames_phase(pid) or self._serving_elsewhere() or self._elsewhere_phase(pid)
        phase, source = (
            (framed, "frames") if framed else (self._marker_phase(pid), "markers") if st.after else (None, "none")
        )
        return Hit(CUT_TRACEBACK, evidence, phase, source, st.ready, self._prefill_hint(pid, ""), pid)
