"""Read one vLLM release's source with `ast`: every logger call and raise with a message we can turn
into a pattern, and the functions on each start-up phase's path (roots named below, then what they
call inside vLLM, a bounded depth; the nearest root decides)."""

from __future__ import annotations

import ast
import re
from collections import deque
from dataclasses import dataclass
from pathlib import Path

LOG_LEVELS = {
    "debug",
    "info",
    "info_once",
    "warning",
    "warning_once",
    "warn",
    "error",
    "exception",
    "critical",
    "debug_once",
}
MIN_LITERAL_CHARS = 12  # shorter templates ("%s", "Error: %s") match too much to mean anything
MAX_DEPTH = 3
# Roots of each phase: vLLM's own function names on the start-up path (V0 and V1), read from
# vllm/worker, vllm/v1/worker, vllm/v1/engine, vllm/model_executor/model_loader, vllm/distributed; a
# "file:function" root names only that file's function. Executors' `_init_executor` stays a network root
# although the multiproc, uniproc and V0 GPU executors also start their workers there (init_device, then
# load_model): without it dev-b lost a right answer (s7 triage log, round 4), so the engine core's
# `wait_for_ready` is still read as the network (tests/test_triage_frames_source.py marks it xfail).
ROOTS: dict[str, tuple[str, ...]] = {
    "weight_loading": (
        "load_model",
        "load_weights",
        "get_model",
        "_get_weights_iterator",
        "download_model",
        "create_weights",
        "initialize_model",
        "_initialize_model",
        "safetensors_weights_iterator",
        "load_weights_and_online_quantize",
        "process_weights_after_loading",
    ),
    "memory_profiling": (
        "profile_run",
        "determine_available_memory",
        "determine_num_available_blocks",
        "_dummy_run",
        "_dummy_sampler_run",
        "_dummy_pooler_run",
        "profile",
        "memory_profiling",
        "_profile_multimodal",
    ),
    "kv_cache_allocation": (
        "initialize_kv_cache",
        "get_kv_cache_config",
        "get_kv_cache_configs",
        "check_enough_kv_cache_memory",
        "_check_enough_kv_cache_memory",
        "initialize_cache",
        "_allocate_kv_cache",
        "allocate_gpu_cache",
        "_allocate_kv_cache_tensors",
        "_reshape_kv_cache_tensors",
        "initialize_kv_cache_tensors",
        "_initialize_kv_caches",
        "_init_cache_engine",
        "get_kv_cache_spec",
        "may_reinitialize_input_batch",
        "raise_if_cache_size_invalid",
        "_get_num_blocks",
    ),
    "cudagraph_capture": (
        "capture_model",
        "_capture_cudagraphs",
        "compile_or_warm_up_model",
        "capture",
        "_warmup_and_capture",
    ),
    "serving": (
        "execute_model",
        "_execute_model",
        "sample_tokens",
        "_sample",
        "compute_logits",
        "step",
        "_prepare_inputs",
        "_update_states",
        "_model_forward",
        "execute_dummy_batch",
    ),
    "network_communication": (
        "init_distributed_environment",
        "initialize_model_parallel",
        "ensure_model_parallel_initialized",
        "init_worker_distributed_environment",
        "_init_executor",
        "_init_workers_ray",
        "initialize_ray_cluster",
        "_wait_until_pg_ready",
        "all_reduce",
        "barrier",
        "broadcast_object",
    ),
    "environment": (
        # The settings and the tokenizer, read before any worker starts (V0 LLMEngine.__init__, V1's API
        # server and AsyncLLM/LLMEngine.__init__): engine arguments -> config, the model registry's
        # inspection of the architecture, the tokenizer. Module-qualified ("file:function"): the names are
        # common (LoRA kernels and Helion have a `get_config` of their own).
        "engine/arg_utils.py:create_engine_config",
        "engine/arg_utils.py:create_model_config",
        "transformers_utils/config.py:get_config",
        "transformers_utils/tokenizer.py:get_tokenizer",
        "tokenizers/registry.py:get_tokenizer",
        "model_executor/models/registry.py:inspect_model_cls",
        "model_executor/models/registry.py:_try_inspect_model_cls",
        "init_device",
        "_check_if_gpu_supports_dtype",
        "check_and_update_config",
        "get_device_capability",
        "device_count",
        "_raise_if_unsupported",
    ),
}
# A function reached from two roots at the same distance takes the earlier phase here: a failure
# while starting is more telling than the serving path the same helper is also on.
PHASE_ORDER = (
    "environment",
    "network_communication",
    "weight_loading",
    "memory_profiling",
    "kv_cache_allocation",
    "cudagraph_capture",
    "serving",
)
# Names too generic to follow through the call graph by name alone.
NOT_FOLLOWED = {
    "forward",
    "__init__",
    "__call__",
    "get",
    "set",
    "items",
    "append",
    "update",
    "to",
    "view",
    "cuda",
    "item",
    "copy_",
    "fill_",
    "run",
    "wait",
    "info",
    "debug",
    "warning",
    "error",
    "format",
    "join",
    "split",
    "keys",
    "values",
    "pop",
    "extend",
    "add",
    "sum",
    "max",
    "min",
    "len",
    "range",
    "isinstance",
    "getattr",
    "setattr",
    "hasattr",
    "print",
    "list",
    "dict",
    "tuple",
    "str",
    "int",
    "float",
    "bool",
    "zip",
    "enumerate",
    "sorted",
    "any",
    "all",
    "apply",
    "call",
    "execute",
    "collective_rpc",
    "_run_workers",
    "empty",
    "zeros",
    "tensor",
    "synchronize",
    "reshape",
    "execute_method",
    "run_method",
    "worker_busy_loop",
}
OOM = re.compile(
    r"out of memory|\bOOM\b|insufficient memory|not enough (?:GPU |device )?memory|"
    r"no available memory|larger than the maximum number of tokens that can be stored|"
    r"larger than the available KV cache memory|"
    r"increase `?gpu_memory_utilization|memory for the cache blocks|cannot allocate memory|"
    r"free memory on device",
    re.I,
)


@dataclass(frozen=True)
class Template:
    literal: tuple[str, ...]  # the literal fragments between placeholders
    level: str | None
    exception: str | None
    module: str
    function: str

    @property
    def pattern(self) -> str:
        return ".*?".join(re.escape(part) for part in self.matched_line if part)

    @property
    def literal_chars(self) -> int:
        return sum(len(part.strip()) for part in self.matched_line)

    @property
    def matched_line(self) -> tuple[str, ...]:
        """The fragments of the one printed line the pattern matches. Triage reads a log line by line,
        so a message with newlines is matched on its first line that has enough literal text (a
        pattern holding a newline could never match). Log writers and pastes drop a line's trailing
        whitespace (vLLM's "No common block size for {n}. " prints as "... for 128."), and a pasted
        continuation line may lose its indent, so a line ends and starts at visible characters."""
        lines = _printed_lines(self.literal)
        return next((ln for ln in lines if _chars(ln) >= MIN_LITERAL_CHARS), max(lines, key=_chars))


def _chars(fragments: tuple[str, ...]) -> int:
    return sum(len(part.strip()) for part in fragments)


def _printed_lines(literal: tuple[str, ...]) -> list[tuple[str, ...]]:
    """Split a message's literal fragments (placeholders between them) into printed lines, each a
    tuple of fragments. A line's last fragment is right-stripped when literal text ends it (an empty
    last fragment means a placeholder ends it), and a line after a newline is left-stripped."""
    lines: list[list[str]] = [[]]
    for part in literal:
        pieces = part.split("\n")
        lines[-1].append(pieces[0])
        lines.extend([piece] for piece in pieces[1:])
    out = []
    for index, line in enumerate(lines):
        if index > 0:
            line[0] = line[0].lstrip()
        line[-1] = line[-1].rstrip()
        out.append(tuple(line))
    return out


@dataclass(frozen=True)
class FunctionInfo:
    module: str
    qualname: str
    calls: frozenset[str]

    @property
    def name(self) -> str:
        return self.qualname.rsplit(".", 1)[-1]


def read_release(root: Path) -> tuple[list[Template], list[FunctionInfo]]:
    templates: list[Template] = []
    functions: list[FunctionInfo] = []
    for path in sorted((root / "vllm").rglob("*.py")):
        module = path.relative_to(root).as_posix()
        try:
            tree = ast.parse(path.read_text(encoding="utf-8", errors="replace"))
        except (SyntaxError, ValueError):
            continue
        visitor = _Visitor(module)
        visitor.visit(tree)
        templates += visitor.templates
        functions += visitor.functions
    return templates, functions


class _Visitor(ast.NodeVisitor):
    def __init__(self, module: str):
        self.module = module
        self.scope: list[str] = []
        self.templates: list[Template] = []
        self.functions: list[FunctionInfo] = []
        self.assigned: list[dict[str, list[ast.expr]]] = []  # per enclosing function: its local names' values

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        self.assigned.append(_assigned_names(node))
        calls = frozenset(name for sub in ast.walk(node) if isinstance(sub, ast.Call) and (name := _callee(sub)))
        self.functions.append(FunctionInfo(self.module, ".".join(self.scope), calls))
        self.generic_visit(node)
        self.assigned.pop()
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # noqa: N815 - ast.NodeVisitor's naming

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in LOG_LEVELS and _is_logger(func.value) and node.args:
            self._add(node.args[0], func.attr.removesuffix("_once"), None)
        self.generic_visit(node)

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = node.exc
        if isinstance(exc, ast.Call) and exc.args:
            self._add(exc.args[0], None, _callee(exc) or "Exception")
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        # `assert cond, msg` raises AssertionError(msg): Python prints it as "AssertionError: <msg>"
        if node.msg is not None:
            self._add(node.msg, None, "AssertionError")
        self.generic_visit(node)

    def _add(self, message: ast.expr, level: str | None, exception: str | None) -> None:
        if isinstance(message, ast.Name) and self.assigned:
            # `msg = f"..."` then `raise ValueError(msg)` / `logger.error(msg)`: each value the function
            # gives that name is a message it may print (one level: a name of a name is not followed).
            for value in self.assigned[-1].get(message.id, ()):
                if not isinstance(value, ast.Name):
                    self._add(value, level, exception)
            return
        literal = _literal_parts(message, self.module)
        if literal is None:
            return
        template = Template(tuple(literal), level, exception, self.module, ".".join(self.scope) or "<module>")
        if template.literal_chars >= MIN_LITERAL_CHARS:
            self.templates.append(template)


def _assigned_names(func: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, list[ast.expr]]:
    """The values a function assigns to plain local names, in its own body (not in the functions,
    classes or lambdas it defines)."""
    out: dict[str, list[ast.expr]] = {}
    todo: list[ast.AST] = list(func.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            out.setdefault(node.targets[0].id, []).append(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            out.setdefault(node.target.id, []).append(node.value)
        todo.extend(ast.iter_child_nodes(node))
    return out


def _callee(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return None


def _is_logger(node: ast.expr) -> bool:
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return name.lower().endswith("logger") or name in ("log", "_log")


_PERCENT = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(?:\d+|\*)?(?:\.\d+)?[diouxXeEfFgGcrsa%]")
_BRACES = re.compile(r"\{[^{}]*\}")


def _literal_parts(node: ast.expr, module: str = "") -> list[str] | None:
    """The literal text of a message expression, split where values are put in; None if unknown.
    `module`: the file's path in the wheel, so that `__name__` and `__package__` keep their values (PEP 562's module
    `__getattr__` raises "module {__name__!r} has no attribute {name!r}": with the name kept, the template is that
    module's alone, not every "module ... has no attribute" that CPython or another package prints)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _PERCENT.split(node.value)
    if isinstance(node, ast.JoinedStr):
        parts = [""]
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts[-1] += value.value
            elif (name := _module_field(value, module)) is not None:
                parts[-1] += name
            else:
                parts.append("")
        return parts
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return _literal_parts(node.left, module)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _literal_parts(node.left, module), _literal_parts(node.right, module)
        if left is None and right is None:
            return None
        return (left or [""])[:-1] + [(left or [""])[-1] + (right or [""])[0]] + (right or [""])[1:]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and isinstance(node.func.value, ast.Constant)
        and isinstance(node.func.value.value, str)
    ):
        return _BRACES.split(node.func.value.value)
    return None


def _module_field(value: ast.expr, module: str) -> str | None:
    """The text an f-string field prints when it is the module's own `__name__` or `__package__` (known from its
    file: "vllm/distributed/nixl_utils.py" is `vllm.distributed.nixl_utils` in package `vllm.distributed`);
    None for any other field, or one with a format spec."""
    if not (
        module
        and isinstance(value, ast.FormattedValue)
        and isinstance(value.value, ast.Name)
        and value.format_spec is None
        and value.conversion in (-1, ord("r"), ord("s"))
    ):
        return None
    dotted = module.removesuffix(".py").replace("/", ".")
    package = dotted.removesuffix(".__init__") if dotted.endswith(".__init__") else dotted.rpartition(".")[0]
    names = {"__name__": dotted.removesuffix(".__init__"), "__package__": package}
    text = names.get(value.value.id)
    if text is None:
        return None
    return repr(text) if value.conversion == ord("r") else text


def phase_of_functions(functions: list[FunctionInfo]) -> dict[tuple[str, str], tuple[str, str, int, tuple[str, ...]]]:
    """(module, function name) -> (phase, root, distance, phases): breadth-first from every root, by
    name; the nearest root gives the phase, and `phases` are all the phases whose roots reach it."""
    by_name: dict[str, list[FunctionInfo]] = {}
    for info in functions:
        by_name.setdefault(info.name, []).append(info)
    best: dict[tuple[str, str], tuple[str, str, int]] = {}
    reached: dict[tuple[str, str], set[str]] = {}
    for phase in PHASE_ORDER:
        queue = deque((info, root, 0) for root in ROOTS[phase] for info in _roots(root, by_name))
        seen: set[tuple[str, str]] = set()
        while queue:
            info, root, depth = queue.popleft()
            key = (info.module, info.name)
            if key in seen:
                continue
            seen.add(key)
            reached.setdefault(key, set()).add(phase)
            held = best.get(key)
            if held is None or held[2] > depth:
                best[key] = (phase, root.rsplit(":", 1)[-1], depth)
            if depth < MAX_DEPTH:
                for callee in info.calls - NOT_FOLLOWED:
                    queue.extend((target, root, depth + 1) for target in by_name.get(callee, ()))
    order = {phase: i for i, phase in enumerate(PHASE_ORDER)}
    return {key: (*held, tuple(sorted(reached[key], key=order.__getitem__))) for key, held in best.items()}


def _roots(root: str, by_name: dict[str, list[FunctionInfo]]) -> list[FunctionInfo]:
    module, _, name = root.rpartition(":")
    return [info for info in by_name.get(name, ()) if info.module.endswith(module)]
