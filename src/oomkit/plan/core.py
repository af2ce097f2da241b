"""`plan(request)`: model shape + GPU + layout + vLLM settings -> the per-GPU memory plan, the
KV pool vLLM will build, and the verdicts (loads? one request? the target?)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from oomkit.errors import UsageError
from oomkit.plan import budget as bud
from oomkit.plan import kv
from oomkit.plan.catalog import Gpu, find_gpu, find_model
from oomkit.plan.defaults import Context as DefaultsContext
from oomkit.plan.defaults import Default, defaults

if TYPE_CHECKING:
    from oomkit.plan.levers import Lever
from oomkit.plan.kv import Capacity, KvLayout
from oomkit.plan.layouts import Layout, validate
from oomkit.plan.model import ModelShape
from oomkit.plan.quant import resolve_kv_dtype, scheme_from_cli
from oomkit.plan.settings import Settings, resolve_settings
from oomkit.plan.state import DTYPE_BYTES, StateConfig, host_has_amx, host_has_avx512_bf16, ssm_dtype
from oomkit.plan.versions import PLATFORMS, Behaviour, PlatformFacts, behaviour, cudagraph_capture_sizes
from oomkit.plan.weights import Weights, weights_for
from oomkit.serial import JsonObject, to_jsonable

GIB = bud.GIB


@dataclass(frozen=True)
class PlanRequest:
    model: str
    gpu: str = "H100-80GB"
    gpus: int | None = None
    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    ep: bool = False
    dcp: int | None = None
    eplb_redundant: int = 0
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes: int | None = None
    num_gpu_blocks_override: int | None = None
    kv_cache_dtype: str = "auto"
    quantization: str | None = None
    block_size: int | None = None
    enable_prefix_caching: bool | None = None
    num_speculative_tokens: int = 0
    use_replayssm: bool = False
    enforce_eager: bool = False
    vllm_version: str | None = None
    context: int | None = None
    concurrency: int | None = None
    gpu_memory_gib: float | None = None
    mamba_ssm_cache_dtype: str | None = None
    assume: dict[str, float] = field(default_factory=dict)
    hf_overrides: JsonObject = field(default_factory=dict)  # config.json fields to replace (--hf-overrides)
    pool: str = "serve"


@dataclass(frozen=True, kw_only=True)
class Plan:
    request: PlanRequest
    model: ModelShape
    gpu: Gpu
    layout: Layout
    behaviour: Behaviour
    settings: Settings
    weights: Weights
    budget: bud.Budget
    kv: KvLayout
    capacity: Capacity
    fits_load: bool
    fits_target: bool | None
    target_blocks: int | None
    assumptions: dict[str, bud.Assumption]
    notes: tuple[str, ...]
    levers: tuple[Lever, ...] = ()
    defaults: tuple[Default, ...] = ()

    def per_gpu_gib(self) -> dict[str, float]:
        b = self.budget
        return {
            k: round(v / GIB, 2)
            for k, v in (
                ("capacity_gib", b.capacity_bytes),
                ("budget_gib", b.budget_bytes),
                ("weights_gib", b.weights_bytes),
                ("activation_gib", b.activation_bytes),
                ("cudagraph_gib", b.cudagraph_bytes),
                ("other_gib", b.other_bytes),
                ("kv_cache_gib", max(0, b.kv_bytes)),
            )
        }

    def to_dict(self) -> JsonObject:
        c = self.capacity
        return {
            "model": self.model.to_dict(),
            "gpu": self.gpu.to_dict(),
            "layout": self.layout.to_dict(),
            "vllm": self.behaviour.to_dict(),
            "settings": to_jsonable(self.settings),
            "per_gpu": to_jsonable(self.per_gpu_gib()),
            "kv_bytes_per_token": self.kv.kv_bytes_per_token,
            "state_bytes_per_sequence": self.kv.state_bytes_per_sequence,
            "block_size": self.kv.block_size,
            "num_blocks": c.num_blocks,
            "kv_cache_tokens": c.kv_cache_tokens,
            "max_concurrency": round(c.max_concurrency, 2),
            "fits": {
                "load": self.fits_load,
                "one_request": self.fits_load and c.fits_one_request,
                "target": self.fits_target,
            },
            "estimated_max_model_len": c.estimated_max_model_len,
            "deployment": {
                "engines": self.layout.dp,
                "gpus": self.layout.gpus,
                "max_concurrency_total": round(c.max_concurrency * self.layout.dp, 2),
                "target_blocks_per_engine": self.target_blocks,
            },
            "kv_groups": {
                "count": len(self.kv.groups),
                "bytes_per_block": c.bytes_per_block,
                "blocks_per_request": c.blocks_per_request,
                "padding_layers": self.kv.padding_layers,
                "mamba_page_padded": self.kv.mamba_page_padded,
            },
            "weights": {
                "total_gib": round(self.weights.total_bytes / GIB, 2),
                "total_params_b": round(self.weights.total_params / 1e9, 2),
                "per_stage_gib": [round(x / GIB, 2) for x in self.weights.per_stage_bytes],
                "by_format_gib": {k: round(v / GIB, 2) for k, v in self.weights.by_format_bytes.items()},
            },
            "defaults": [d.to_dict() for d in self.defaults],
            "levers": [lever.to_dict() for lever in self.levers],
            "assumptions": [a.to_dict() for a in self.assumptions.values()],
            "notes": list(self.notes),
        }


def resolve_layout(req: PlanRequest, gpu: Gpu) -> Layout:
    given = [x for x in (req.tp, req.pp, req.dp) if x]
    tp, pp, dp = req.tp or 1, req.pp or 1, req.dp or 1
    if req.gpus and not given:  # only a GPU count: TP inside the NVLink domain, PP across domains
        tp = min(req.gpus, gpu.nvlink_domain) if req.gpus > gpu.nvlink_domain else req.gpus
        pp = max(1, req.gpus // tp)
    layout = Layout(tp=tp, pp=pp, dp=dp, ep=req.ep, dcp=req.dcp or 1, eplb_redundant=req.eplb_redundant, pool=req.pool)
    if req.gpus and layout.gpus != req.gpus:
        raise UsageError(
            f"--gpus {req.gpus} does not match TP x PP x DP = {layout.gpus}",
            hint="make --tp x --pp x --dp equal --gpus, or drop --gpus",
        )
    return layout


@dataclass(frozen=True)
class Inputs:
    """What plan() resolves from the request before any memory arithmetic."""

    request: PlanRequest
    model: ModelShape
    gpu: Gpu
    behaviour: Behaviour
    platform: PlatformFacts
    layout: Layout
    settings: Settings


def plan(req: PlanRequest, model: ModelShape | None = None) -> Plan:
    """vLLM's memory for one request of the planner; levers are the caller's (oomkit.plan.levers)."""
    inp, cap_gib, cap_src = _inputs(req, model)
    m, gpu, b, layout, s = inp.model, inp.gpu, inp.behaviour, inp.layout, inp.settings
    notes = list(m.notes)
    a = bud.assumptions(req.assume)
    scheme = scheme_from_cli(req.quantization, m.dtype, m.quant) if req.quantization else m.quant
    mtp = req.num_speculative_tokens > 0 and m.mtp_layers > 0
    w = weights_for(m, layout, scheme, mtp=mtp)
    block = _block_size(inp)
    state, layout_kv = _kv_layout(inp, block, mtp)
    notes += _model_notes(m, mtp) + kv.sink_notes(m, b)
    act, graphs = _runtime_bytes(inp, a)
    usage = bud.Usage(weights_bytes=w.per_gpu_bytes, activation_bytes=act, cudagraph_bytes=graphs)
    bg = bud.budget(int((cap_gib or 0) * GIB), usage, s, b, gpu.platform, a)
    if cap_gib is None:
        bg = replace(bg, capacity_bytes=0, budget_bytes=0, startup_ok=True)
    notes += list(bg.notes)
    _note_estimates(a, act, graphs, s)
    cap = _capacity(inp, layout_kv, bg)
    if s["auto_fit"] and not cap.fits_one_request and cap.estimated_max_model_len:
        notes.append(f"auto-fit: max_model_len reduced from {s['max_model_len']} to {cap.estimated_max_model_len}")
        inp = replace(inp, settings={**s, "max_model_len": cap.estimated_max_model_len})
        cap = _capacity(inp, layout_kv, bg)
    fits_load = bg.startup_ok and bg.kv_bytes > 0 and not cap.no_memory
    target_blocks, fits_target = _target(inp, layout_kv, cap, fits_load)
    notes.append(f"capacity: {cap_src}")
    return Plan(
        request=req,
        model=m,
        gpu=gpu,
        layout=layout,
        behaviour=b,
        settings=inp.settings,
        weights=w,
        budget=bg,
        kv=layout_kv,
        capacity=cap,
        fits_load=fits_load,
        fits_target=fits_target,
        target_blocks=target_blocks,
        assumptions=a,
        notes=tuple(notes),
        defaults=_defaults(inp, state, layout_kv, block),
    )


def _inputs(req: PlanRequest, model: ModelShape | None) -> tuple[Inputs, float | None, str]:
    """The resolved inputs, the device memory in GiB (None: not fixed) and where it came from."""
    m = model or find_model(req.model, req.hf_overrides or None)
    gpu = find_gpu(req.gpu, req.gpu_memory_gib)
    b = behaviour(req.vllm_version, gpu.platform)
    layout = resolve_layout(req, gpu)
    validate(layout, m)
    cap_gib, cap_src = gpu.capacity_gib(req.gpu_memory_gib)
    if cap_gib is None and req.kv_cache_memory_bytes is None:
        raise UsageError(
            f"{gpu.name} has no fixed memory size", hint="pass --gpu-memory-gib N or --kv-cache-memory-bytes N"
        )
    s = resolve_settings(req, m, gpu, b, layout, cap_gib or 0.0)
    return Inputs(req, m, gpu, b, PLATFORMS[gpu.platform], layout, s), cap_gib, cap_src


def _kv_layout(inp: Inputs, block: int, mtp: bool) -> tuple[StateConfig, KvLayout]:
    req, m, pf, s = inp.request, inp.model, inp.platform, inp.settings
    kvd = resolve_kv_dtype(req.kv_cache_dtype, m.dtype)
    if kvd.mla_bytes_per_token and not m.mla:
        raise UsageError(f"--kv-cache-dtype {req.kv_cache_dtype} is an MLA-only layout")
    state = _state(inp)
    m_kv, extra = (_with_mtp(m), m.mtp_layers) if mtp else (m, 0)
    kernel = pf.mla_kernel_block if m.mla else pf.attn_kernel_block
    kv_in = kv.KvInputs(
        m_kv,
        inp.layout,
        kvd,
        block,
        s["max_model_len"],
        s["in_flight_tokens"],
        state,
        pf.mla_align_min,
        kernel,
        extra,
        kv.sliding_lookahead(inp.behaviour, m, req.num_speculative_tokens) if mtp else 0,
    )
    layout_kv = kv.build(kv_in)
    kv.check_sinks(m, layout_kv.block_size)
    if state.mode == "all":  # one state per mamba block of block_size tokens (0.17-0.30)
        state = replace(state, mamba_blocks_all_mode=kv.cdiv(s["max_model_len"], layout_kv.block_size))
        layout_kv = kv.build(replace(kv_in, state=state))
    return state, layout_kv


def _model_notes(m: ModelShape, mtp: bool) -> list[str]:
    notes = []
    if mtp:
        notes.append(f"{m.mtp_layers} MTP layer(s) loaded for speculative decoding: weights and KV included")
    if m.vision:
        notes.append(
            f"vision tower counted: {m.vision.params / 1e9:.2f}B parameters on every rank "
            "(encoder profiling memory not modelled)"
        )
    return notes


def _runtime_bytes(inp: Inputs, a: dict[str, bud.Assumption]) -> tuple[int, int]:
    """The activation peak of the profile run and the CUDA-graph pool, each an estimate unless assumed."""
    req, m, s, layout = inp.request, inp.model, inp.settings, inp.layout
    act = _override(a, req, "activation_gib") or bud.activation_bytes(
        m, layout, s["max_num_batched_tokens"], s["max_num_seqs"], a
    )
    graphs = 0
    if inp.platform.cudagraphs and not req.enforce_eager:
        sizes = cudagraph_capture_sizes(
            s["max_num_seqs"] * (1 + req.num_speculative_tokens),
            s["max_num_batched_tokens"],
            inp.gpu.arch == "blackwell",
        )
        graphs = _override(a, req, "cudagraph_gib") or bud.cudagraph_bytes(m, layout.pp, len(sizes), a)
    return act, graphs


def _defaults(inp: Inputs, state: StateConfig, layout_kv: KvLayout, base_block: int) -> tuple[Default, ...]:
    req = inp.request
    ctx = DefaultsContext(
        model=inp.model,
        platform=inp.platform,
        behaviour=inp.behaviour,
        settings=inp.settings,
        state=state,
        kv=layout_kv,
        requested_block=req.block_size,
        base_block=base_block,
        requested_ssm_dtype=req.mamba_ssm_cache_dtype,
        requested_prefix=req.enable_prefix_caching,
        requested_mnbt=req.max_num_batched_tokens,
        on_cuda=inp.gpu.platform == "cuda",
    )
    return defaults(ctx)


def _with_mtp(m: ModelShape) -> ModelShape:
    """The draft layers vLLM builds for MTP speculative decoding: one attention layer each."""
    from oomkit.plan.model import Layer

    kind = "mla" if m.mla else "full"
    extra = tuple(Layer(m.num_layers + i, kind, "dense") for i in range(m.mtp_layers))
    return replace(m, layers=m.layers + extra)


def _capacity(inp: Inputs, layout_kv: kv.KvLayout, bg: bud.Budget) -> kv.Capacity:
    return kv.capacity(layout_kv, max(0, bg.kv_bytes), inp.settings, inp.layout.dcp, inp.behaviour)


def _note_estimates(a: dict[str, bud.Assumption], act: int, graphs: int, s: Settings) -> None:
    if "activation_gib" not in a:
        a["activation_gib"] = bud.Assumption(
            "activation_gib",
            round(act / GIB, 3),
            "GiB",
            f"estimated: profile forward of max_num_batched_tokens={s['max_num_batched_tokens']} or the sampler "
            f"on max_num_seqs={s['max_num_seqs']} rows, whichever is larger",
        )
    if "cudagraph_gib" not in a:
        a["cudagraph_gib"] = bud.Assumption(
            "cudagraph_gib",
            round(graphs / GIB, 3),
            "GiB",
            "estimated: cudagraph_base_gib + cudagraph_mib_per_layer_size x layers x capture sizes "
            "(0 with --enforce-eager or on CPU)",
        )


def _override(a: dict[str, bud.Assumption], req: PlanRequest, name: str) -> int | None:
    if name in req.assume:
        a[name] = bud.Assumption(name, float(req.assume[name]), "GiB", "--assume / calibration", True)
        return int(float(req.assume[name]) * GIB)
    return None


def _state(inp: Inputs) -> StateConfig:
    req, m, pf = inp.request, inp.model, inp.platform
    mode = inp.behaviour.mamba_cache_mode_prefix if inp.settings["enable_prefix_caching"] else "none"
    if m.linear is None:
        return StateConfig(2, 2, req.num_speculative_tokens, mode)
    # On CPU the float32 reset happens only where the accelerated GDN kernel runs (AVX-512 BF16).
    ssm = ssm_dtype(m, req.mamba_ssm_cache_dtype, pf.forces_ssm_fp32 and host_has_avx512_bf16())
    ckpt = 0
    if mode == "align" and (m.linear.kind == "mamba2" or (m.linear.kind == "kda" and pf.kda_prefill_checkpoint)):
        ckpt = 1  # mamba_mixer2.py / kimi_k3 kda.py reserve one prefill-checkpoint block
    return StateConfig(
        DTYPE_BYTES.get(m.dtype, 2),
        DTYPE_BYTES.get(ssm, 4),
        req.num_speculative_tokens,
        mode,
        use_replayssm=req.use_replayssm,
        prefill_checkpoint_blocks=ckpt,
    )


def _block_size(inp: Inputs) -> int:
    req, m, b, pf = inp.request, inp.model, inp.behaviour, inp.platform
    if m.mla and pf.name == "cpu":
        if not host_has_amx():
            return 16  # the reference CPU MLA decode kernel compiles only for block 16 (platforms/cpu.py)
        return req.block_size or pf.default_block_size or b.default_block_size  # AMX MLA: no override
    if req.block_size:
        return req.block_size
    if m.mla:
        return pf.mla_block_size or b.default_block_size
    return pf.default_block_size or b.default_block_size


def _target(inp: Inputs, layout_kv: kv.KvLayout, cap: kv.Capacity, loads: bool) -> tuple[int | None, bool | None]:
    req, s = inp.request, inp.settings
    if not req.concurrency and not req.context:
        return None, None
    ctx = req.context or s["max_model_len"]
    # N requests spread over the DP engines; each engine has its own KV pool.
    n = -(-(req.concurrency or 1) // inp.layout.dp)
    per_request = kv.blocks_needed(layout_kv.groups, ctx, inp.layout.dcp, s["in_flight_tokens"])
    needed = n * per_request
    # the null block, and the sink blocks 0.14-0.29 pop
    usable = cap.num_blocks - 1 - kv.sink_blocks(layout_kv, inp.model.sink_tokens, inp.behaviour)
    ok = loads and ctx <= s["max_model_len"] and n <= s["max_num_seqs"] and needed <= usable
    return needed, ok
