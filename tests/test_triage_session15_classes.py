"""Classes of session 15 (issue 13). LLM.generate's progress bar ("Processed prompts: N%|...| n/N") says how an
offline run ended when no failure is logged: at N/N the call finished (healthy); left at 0/N, with nothing after it,
no prompt ever finished (a hang: timeout, confidence low); part-way it says nothing. tqdm redraws the bar in place, so
the last redraw on a line counts. vLLM 0.6-0.7 word the shared-memory broadcast wait "No available block found in 60
second." (later "No available shared memory broadcast block ..."): the same hang. A lone out-of-memory line whose
PyTorch allocation is 98% of the device or more came from a step no gpu_memory_utilization budget bounds: weight
loading (low), not serving."""

from pathlib import Path

import pytest
from _triage_synth import Case, checked_verdict

INIT = "INFO 04-09 02:07:01 [core.py:162] init engine (profile, create kv cache, warmup model) took 68.69 seconds\n"
BAR = "Processed prompts: {pct:>3}%|{fill:<10}| {done}/{total} [00:03<00:00,  4.40it/s, est. speed input: 770.79 toks/s]"


def bar(done: int, total: int) -> str:
    pct = 100 * done // total
    return BAR.format(pct=pct, fill="█" * (pct // 10), done=done, total=total)


def oom(allocated_gib: float, total_gib: float) -> str:
    return (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 462.00 MiB. GPU 0 has a total capacity of "
        f"{total_gib} GiB of which 145.19 MiB is free. Including non-PyTorch memory, this process has {total_gib - 0.2:.2f} "
        f"GiB memory in use. Of the allocated memory {allocated_gib} GiB is allocated by PyTorch, and 12.00 MiB is "
        "reserved by PyTorch but unallocated.\n"
    )


CASES = {
    "offline_generate_finished": Case(bar(16, 16) + "\n", "healthy", False, "medium"),
    "offline_generate_redrawn_to_the_end_on_one_line": Case(
        bar(0, 4) + "\r" + bar(2, 4) + "\r" + bar(4, 4) + "\n", "healthy", False, "medium"
    ),
    "offline_generate_never_finished_a_prompt": Case(INIT + bar(0, 1) + "\n", "timeout", False, "low"),
    "offline_generate_part_way_says_nothing": Case(bar(2, 4) + "\n", "unknown", False),
    "offline_generate_part_way_after_start_up_is_start_up": Case(INIT + bar(2, 4) + "\n", "healthy", False),
    "shared_memory_wait_in_0_6_wording": Case(
        "WARNING 10-21 10:12:55 shm_broadcast.py:386] No available block found in 60 second. \n",
        "timeout",
        False,
        "medium",
    ),
    "oom_with_pytorch_holding_the_whole_device": Case(oom(78.78, 79.44), "weight_loading", True, "low"),
    "oom_with_pytorch_inside_a_budget_is_serving": Case(oom(74.06, 79.14), "serving_prefill", True, "low"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_session15_class(name: str, tmp_path: Path) -> None:
    checked_verdict(name, CASES[name], tmp_path)
