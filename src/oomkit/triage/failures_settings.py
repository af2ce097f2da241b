"""Refusals of what the launch was given: checkpoint files that are missing, of another format or that do not fit the
model's parameters, and configuration that vLLM's or its wrappers' checks reject. `failures.py` splices them into
`FAILURES` after the compile failures, where their match order puts them."""

from __future__ import annotations

from oomkit.triage.rules import Failure, T, V, rx

SETTINGS_FAILURES: tuple[Failure, ...] = (
    Failure(
        "E-WEIGHTFILES",
        rx(
            r"Cannot find any model weights|SafetensorError|Error while deserializing header|No such file or directory: '[^']*\.safetensors'|ValueError: No supported weights? (?:files? )?found"
            # a checkpoint tensor the model has no parameter for: load_weights' `params_dict[name]`
            # (also the quantization state checkpoints carry beside a weight: bitsandbytes' absmax / quant_map /
            # nested_* / quant_state.*, ModelOpt's *_quantizer.* and amax)
            # (a retyped paste may drop the quotes)
            r"|^KeyError: '?(?:\w+\.)+(?:\w*weight\w*|bias|qweight|qzeros|scales|g_idx|\w+_scale(?:_inv)?"
            r"|absmax|quant_map|nested_\w+|quant_state\.\w+|\w*_quantizer\.\w+|\w*amax)(?:'|$)"
            # the same, through AutoWeightsLoader (models/utils.py _load_module, every release 0.6.6-0.34)
            # (a retyped paste may lose or change the quotes: "named :fc.weight in qwen3_5MultiTokenPredictor")
            r"|There is no module or parameter named (?:'[^']+'|[\"`:]?\S+ in \w)"
            # a checkpoint tensor refused by name elsewhere: Qwen2-VL's load_weights in 0.6 ("Unexpected weight:
            # visual.blocks.0...") and MLX's Module.load_weights, which vllm-metal loads through ("Received 54
            # parameters not in model: ...", "Missing 2 parameters: ...")
            r"|Unexpected weight: (?:\w+\.)+\w+|Received \d+ parameters not in model[:;]|Missing \d+ parameters: (?:\w+\.)+\w"
            # a checkpoint tensor of another shape than the parameter it is sharded into: the weight loaders'
            # `loaded_weight.narrow(dim, start, size)` (torch's narrow check)
            r"|start \(\d+\) \+ length \(\d+\) exceeds dimension size \(\d+\)"
            # a parameter no checkpoint tensor filled: the loader's check after load_weights (default_loader.py
            # load_weights, 0.6-0.34: "Following weights were not initialized from checkpoint: {...}") and the models'
            # own before it (gemma.py load_weights, 0.3-0.5: "Some weights are not initialized from checkpoints: {...}")
            r"|(?:Following weights were|Some weights are) not initialized from checkpoints?: "
        ),
        "config",
        "weight_loading",
        False,
        56,
        "the weight files are missing, of another format than asked for, or corrupt",
        "RuntimeError: Cannot find any model weights with `/models/vicuna-13b`",
        "vllm/model_executor/model_loader/default_loader.py (_prepare_weights); safetensors' deserialising errors; "
        "the models' load_weights (`param = params_dict[name]`, e.g. vllm/model_executor/models/llama.py); "
        "AutoWeightsLoader._load_module (vllm/model_executor/models/utils.py); vllm/model_executor/models/qwen2_vl.py "
        "load_weights (0.6); mlx/nn/layers/base.py Module.load_weights (strict), under vllm-metal",
    ),
    Failure(
        "E-PINNED",
        # --cpu-offload-gb keeps the offloaded layers' parameters in pinned host memory that the GPU reads through a
        # CUDA view (UVA); where the host cannot pin memory (WSL, some containers) the view's assertion stops the model
        # while its layers are built (models/utils.py maybe_offload_to_cpu -> get_cuda_view_from_cpu_tensor)
        rx(r"CPU tensor must be pinned"),
        "config",
        "weight_loading",
        False,
        56,
        "the layers offloaded with --cpu-offload-gb need pinned host memory, which this host (WSL, a container) "
        "does not give: run without --cpu-offload-gb or on a host that can pin memory",
        "AssertionError: CPU tensor must be pinned",
        "vllm/utils/torch_utils.py get_cuda_view_from_cpu_tensor (vllm/utils/__init__.py before 0.11), called by "
        "vllm/model_executor/models/utils.py maybe_offload_to_cpu while the model is built (0.10-0.34)",
    ),
    Failure(
        "E-CONFIG",
        rx(
            r"prefix_cache_retention_interval .*(?:is set but|must be)|--mamba-block-size can only be set|tool choice requires --enable-auto-tool-choice|--enable-auto-tool-choice requires tool_parser|unrecognized arguments:|error: argument "
            # argparse's other refusals of a command line ("vllm serve: error: the following arguments are required: model_tag")
            r"|: error: (?:the following arguments are required|ambiguous option|one of the arguments .{1,200} is required)"
            # argparse's usage of vLLM's own parsers, which it prints before that error line (an excerpt may keep only
            # the usage): "usage: vllm serve [model_tag] [options]", "usage: api_server.py [-h] [--host HOST] ...".
            # Each branch keeps its program's name in its literal: "usage: " alone is in every stats line ("GPU KV
            # cache usage: 35.2%"), and the prefilter would pass them all to Python
            r"|\busage: vllm \w+ |\busage: (?:api_server|run_batch)\.py \[-h\] \[--"
            # pydantic's refusal of one of vLLM's config classes (VllmConfig, ModelConfig, ...), not of a request's or
            # a response's model (CompletionResponseChoice: the API layer while serving)
            r"|ValidationError: \d+ validation errors? for \w*Config\b"
            # and its line for one refused field, quoted without the header: vLLM's configs are pydantic dataclasses,
            # whose input is the constructor's ArgsKwargs (a request model's input is a dict)
            r"|\[type=\w+, input_value=ArgsKwargs\("
            # or that line cut before its bracket: pydantic's "Value error, <the validator's message>" of a config
            # field (ModelConfig's quantization, max_model_len, ... checks raise ValueError inside the validator)
            r"|^\s*Value error, (?!.*\[type=\w+, input_value=\{)"
            # pydantic v1's line for a refused field ("  <the validator's message> (type=value_error)"), as a program
            # that validates its settings with pydantic v1 re-raises vLLM's own ValueError (an attention backend the
            # model cannot use, a length over the model's)
            r"|\(type=value_error(?:\.\w+)*\)\s*$"
        ),
        "config",
        # the corpus's phase vocabulary (corpus/README.md): arguments and settings refused before any engine
        # starts are the environment, as external labellers file them (e010, ua012), not a serving crash
        "environment",
        False,
        50,
        "vLLM rejected its configuration at startup",
        "ValueError: --enable-auto-tool-choice requires tool_parser to be set",
        f"{V} §3 E-TOOLCFG; {T} §5-6",
    ),
)
