"""Environment failure signatures: the software/driver stack, the host, the model against this installation, the
attention backend, kernel builds and CPU instructions (`failures.py` splices them in, in this order, after the
network's)."""

from __future__ import annotations

from oomkit.triage.rules import Failure, rx

ENVIRONMENT_FAILURES: tuple[Failure, ...] = (
    Failure(
        "E-ENV",
        rx(
            r"cudaGetDeviceCount|Error 80[0-9]\b|forward compatibility was attempted|system not yet initialized|CUDA driver version is insufficient|NVIDIA driver on your system is too old|no kernel image is available for execution|No CUDA GPUs are available|Failed to infer device type|libcuda\.so|undefined symbol|GLIBC_\d|Failed to initialize NVML|NVML Shared Library Not Found|Driver/library version mismatch|[Ff]abric ?[Mm]anager|No package metadata was found for vllm|[Aa]ddress already in use|requires (?:a GPU with )?compute capability|not supported on (?:this|your) (?:GPU|device|platform)|ModuleNotFoundError: No module named|ImportError: |compute capability (?:below|of at least|>=)|only supports? (?:Ampere|Hopper)|HIP error: invalid device function|'_OpNamespace' '_\w+' object has no attribute|Torch not compiled with CUDA enabled|Too large swap space|cannot open shared object file|Version mismatch: The cluster was started with"
            r"|No platform detected, vLLM is running on UnspecifiedPlatform"
            # a program written for another vLLM release reaching for a name this one lacks ("module 'vllm.envs' has no
            # attribute 'VLLM_USE_V1'": the `__getattr__` of vllm/envs.py and vllm/__init__.py): the versions differ
            r"|\bmodule '?vllm(?:\.\w+)*'? has no attribute\b"
            r"|no CUDA-capable device is detected|CUDA-capable device\(s\) is/are busy or unavailable|invalid device ordinal"
            # libtpu unable to open the TPU (another process holds it, or the VM has none): "TPU initialization failed:
            # open(/dev/vfio/0): Device or resource busy"
            r"|TPU initialization failed: "
            # the process's uid has no passwd entry (a container run as an arbitrary uid: OpenShift, `docker run -u`):
            # CPython's pwd.getpwuid refuses it when getpass.getuser() names the cache directories of torch.compile,
            # Triton or vLLM itself
            r"|getpwuid\(\): uid not found"
            # CUDA_VISIBLE_DEVICES holding device UUIDs (MIG slices, "GPU-..."), which vLLM's platform layer reads as
            # indices (platforms/interface.py device_id_to_physical_device_id: `int(device_ids[device_id])`)
            r"|invalid literal for int\(\) with base 10: '(?:MIG|GPU)-"
            # the CUDA toolkit's libdevice bitcode that Triton or NVVM links kernels against, missing from the install
            r"|libdevice[\w.]*\.bc\b"
            # FlashInfer's check that its precompiled kernel package matches it ("flashinfer-cubin version (0.6.13) does
            # not match flashinfer version (0.6.14). Please install the same version of both packages."); it starts at a
            # literal, as a leading `[\w-]+` would try every start in a long run of word characters (quadratic)
            r"|\bversion \([\w.+-]+\) does not match [\w-]+ version \([\w.+-]+\)"
            # Ascend's kernel package built for another SoC than the NPU's (CANN's run.sh / ops package check: "the
            # socversion Ascend910B1 of bin package does not match the current device socverison Ascend310P3")
            r"|socversion \S+ of bin package does not match the current device"
            # CANN without a compiled kernel binary for an operator on this SoC and these dtypes ("Cannot find bin of op
            # PromptFlashAttention, integral key 0/1/|bf16/ND/...", "Cannot find binary for op PromptFlashAttention."):
            # Ascend's "no kernel image is available"
            r"|Cannot find bin(?:ary)? (?:of|for) op \w"
            # or with a kernel package whose dynamic kernel configs it cannot parse ("AclNN_Inner_Error(EZ9999): Parse
            # dynamic kernel config fail." / "Failed to ParseDynamicKernels." / "AclOpKernelInit failed opType")
            r"|Parse dynamic kernel config fail|Failed to ParseDynamicKernels\b"
            # CANN's graph engine failing to start when torch_npu first sets its compile options ("GEInitialize failed",
            # "GELib::InnerInitialize failed", "OpCompileProcessor init failed"): the toolkit's install or its
            # environment (set_env.sh, the operator package path), before any model runs
            r"|\bGEInitialize failed|GELib::InnerInitialize failed|OpCompileProcessor init failed"
            # Triton looking libcuda up with `ldconfig -p` (backends/nvidia/driver.py libcuda_dirs) in an image without
            # ldconfig
            r"|No such file or directory: '(?:/s?bin/)?ldconfig'"
            r"|CUDA driver is a stub library|system has unsupported display driver|PTX was compiled with an unsupported toolchain"
            r"|Found no NVIDIA driver on your system|CUDA unknown error - this may be due to an incorrectly set up environment"
            r"|(?i:cuda) call failed lazily at initialization|Failed to find C compiler|Python\.h: No such file"
            # PyTorch asked for a device's properties with no GPU visible (aten/src/ATen/cuda/CUDAContext.cpp:
            # TORCH_INTERNAL_ASSERT(device >= 0 && device < num_gpus)); cuBLAS refusing a call its build or the GPU
            # does not support (a cuBLAS wheel other than the one PyTorch was built with, or an older architecture)
            r"|device >= 0 && device < num_gpus INTERNAL ASSERT FAILED"
            r"|CUBLAS_STATUS_(?:INVALID_VALUE|NOT_SUPPORTED|ARCH_MISMATCH)\b"
            r"|only supported (?:on|in|by) (?:Hopper|Blackwell|Ampere|Ada|SM ?\d+|sm_?\d+|FlashAttention ?\d|FA ?\d|CUDA\b|ROCm|XPU)"
            r"|not supported on the current device|Unsupported (?:GPU |CUDA |SM )?architecture\b"
            # PyTorch's lazy device initialisation refusing a forked child of a process that already opened the
            # device (torch/cuda/__init__.py _lazy_init; torch.xpu, torch.mtia and torch_npu keep the same guard and
            # wording: "Cannot re-initialize NPU in forked subprocess")
            r"|Failed to load NCCL library|Cannot re-initialize (?:CUDA|NPU|XPU|MTIA) in forked subprocess"
            # a table keyed by the platform with no row for this one (the quantization kernels' _POSSIBLE_KERNELS
            # [current_platform._enum] in choose_scaled_mm_linear_kernel and its kin): the platform lacks the feature
            r"|KeyError: <PlatformEnum\.\w+: \d+>"
            # CPython's multiprocessing refusing how the program starts vLLM's worker processes: from a daemonic
            # pool worker (process.py BaseProcess.start's assert) or, under spawn, from a script without a
            # `if __name__ == "__main__":` guard (spawn.py _check_not_importing_main, a message CPython breaks over
            # lines: "An attempt has been made to start a new process before the" / "current process has finished
            # its bootstrapping phase.")
            r"|daemonic processes are not allowed to have children"
            r"|An attempt has been made to start a new process before the|process has finished its bootstrapping phase"
            # Triton refusing a dtype the GPU lacks ("type fp8e4nv not supported in this architecture"), a kernel not
            # built for the GPU's generation ("block scaled fp8 gemm is not implemented for Blackwell")
            r"|not supported in this architecture|not implemented for (?:Blackwell|Hopper|Ampere|Ada|Turing|Volta|SM ?\d+|sm_?\d+)\b"
            # vLLM's quantization capability checks (VllmConfig._get_quantization_config, compressed-tensors' and
            # Quark's _check_scheme_supported, MoeWNA16Config); CUDA's name for "no kernel image" in the
            # "Search for `cudaErrorNoKernelImageForDevice'" hint PyTorch prints under a CUDA error
            r"|is not supported for the current GPU|cudaErrorNoKernelImageForDevice"
            # CUDA refusing a kernel binary it was handed (cudaErrorInvalidKernelImage, "device kernel image is
            # invalid"): Triton's or a JIT's cubin built for another architecture or a newer driver than the host's
            r"|device kernel image is invalid"
            # compressed-tensors' scheme check, also as the tuple its message was built as in some releases
            # ("('Quantization scheme is not supported for ', 'the current GPU. Min capability: 80. ', ...)")
            r"|Quantization scheme is not supported for"
            # vllm/executor/ray_utils.py, later vllm/v1/executor/ray_utils.py (initialize_ray_cluster, 0.6-0.19): the
            # Ray node the engine starts on has no device of its kind ("GPU", "TPU", ...)
            r"|Current node has no \w+ available\. |vLLM engine cannot start without \w+\. Make sure"
            # and its check that the driver's own node is among the GPU nodes (ray_utils.py _verify_bundles, 0.6-0.10:
            # "Ray does not allocate any GPUs on the driver node. Consider adjusting the Ray placement group or running
            # the driver on a GPU node."): the cluster's layout, like the node with no GPU above
            r"|Ray does not allocate any GPUs on the driver node"
            # vllm/utils/deep_gemm.py's stand-in for a missing or too old deep_gemm package
            r"|backend is not available or outdated\. Please install"
            # ptxas (CUDA's assembler, run by Triton and JIT builds) that predates the GPU's architecture, or refuses
            # the PTX a compiler emitted for it ("PTX .version 8.4 does not support .target sm_120a", then "ptxas
            # fatal : Ptx assembly aborted"; Triton raises it as PTXASError); FlashInfer's JIT finding no CUDA
            # architecture it was built for among the GPU's (flashinfer/jit/core.py "No supported CUDA architectures
            # found for major versions")
            r"|is not defined for option 'gpu-name'|does not support \.target sm_\w+|ptxas fatal\s*:|PTXASError"
            r"|No supported CUDA architectures found for major versions"
            # DeepGEMM's host-side check (DG_HOST_ASSERT, csrc/utils/exception.hpp: "Assertion error (file:line): cond"):
            # the kernel library refusing this GPU's architecture or this shape, raised from its JIT heuristics
            r"|Assertion error \(\S*deep_?gemm\S*\)"
            # Ray's raylet (store_runner.cc): the object store asked for more /dev/shm than the container has
            r"|System memory request exceeds memory available in /dev/shm"
            # vLLM's CUTLASS scaled-mm dispatch built without a kernel for this GPU (csrc/quantization/cutlass_w8a8/
            # scaled_mm_entry.cu: "No compiled cutlass_scaled_mm for a compute capability less than ...")
            r"|No compiled \w+ for a (?:CUDA )?(?:device )?compute capability"
            # rocBLAS with no Tensile library for this GPU's gfx target (the ROCm build does not cover the card)
            r"|Cannot read \S*TensileLibrary\S*|rocBLAS error: Cannot read"
            # Transformers 5's per-layer (heterogeneous) config refusing the global read an older vLLM does
            r"|AmbiguousGlobalPerLayerAttributeError"
            # a process vLLM spawns (the engine core, workers) cannot receive the config: a class a patching library
            # defined inside a function (Unsloth's BitsAndBytesConfig) does not pickle (CPython's pickle)
            # (CPython's pickle), nor does a trust_remote_code config class Transformers loaded from the model's repo
            # (`transformers_modules.*`), which the spawned process cannot import
            r"|Can't pickle local object|Can't pickle <class 'transformers_modules\."
            # PyTorch's caching allocator refusing PYTORCH_CUDA_ALLOC_CONF=expandable_segments with the memory pool
            # vLLM's sleep mode allocates from (c10/cuda/CUDACachingAllocator.cpp)
            r"|Expandable segments are not compatible with memory pool"
            # the host's file system refusing a write vLLM, Triton or Inductor makes at start-up (cache and config
            # directories under a non-root UID or a read-only root: OpenShift's restricted SCC, read-only containers)
            r"|PermissionError: \[Errno 13\] Permission denied|\[Errno 30\] Read-only file system"
            # PyTorch's dispatcher finding no kernel of an op for the tensor's backend: the extension that registers
            # it was built for another platform (a ROCm or CPU build of vLLM's _C on CUDA) or not built at all
            r"|Could not run '[\w:.]+' with arguments from the '\w+' backend"
            # vLLM's GPU peer-to-peer access check, run as a Python subprocess of the interpreter that started vLLM
            # (vllm/distributed/device_communicators/custom_all_reduce_utils.py gpu_p2p_access_check): it exiting
            # non-zero is the host (drivers, P2P, that interpreter's environment), before any collective runs
            r"|custom_all_reduce_utils\.py'?\]' returned non-zero exit status"
            # a native library a Python package loads at import that the host lacks or cannot load (torchcodec's
            # "Could not load libtorchcodec. Likely causes: FFmpeg is not properly installed", cuDNN's "Could not load
            # library libcudnn_cnn_infer.so.8")
            r"|Could not load lib\w*"
            # Habana's runtime finding no Gaudi to acquire (habana_frameworks hpu init: "synStatus=8 [Device not found]
            # Device acquire failed."), as "No CUDA GPUs are available" on NVIDIA
            r"|synStatus=\d+ \[Device not found\]|Device acquire failed"
            # an exception naming a library, kernel build, backend or device the installation lacks (vLLM's "NIXL is
            # not available", "vllm_flashmla_C is not available, likely was not compiled", "DeepGEMM backend is not
            # available", TRL's "The requested device for vllm (cuda:1) is not available"): bounded to the exception
            # line's own message
            r"|(?:Runtime|Value|Import|Assertion|OS)Error: [^\n]{0,120}?\b(?:is|are) not available\b"
        ),
        "environment",
        "environment",
        False,
        70,
        "the software/driver stack or the host setup is wrong (driver, CUDA build, missing module, port)",
        "RuntimeError: Unexpected error from cudaGetDeviceCount(). Error 804: forward compatibility was attempted on non supported HW",
        "vLLM/torch/CUDA error texts; recipe requirements (CUDA 13, driver r580+); glibc dlerror() "
        "(cannot open shared object file); Ray's check_version_info (Version mismatch: The cluster was started with); "
        "vllm/platforms/__init__.py (no platform plugin or builtin platform detected); CUDA runtime "
        "cudaGetErrorString() of cudaErrorNoDevice, DevicesUnavailable, InvalidDevice, StubLibrary, "
        "SystemDriverMismatch, UnsupportedPtxVersion; torch/cuda/__init__.py _lazy_init (no driver, "
        "DeferredCudaCallError), c10/cuda/CUDAFunctions.cpp (CUDA unknown error); triton/runtime/build.py (no C "
        "compiler; gcc without Python's headers builds triton's launcher); vLLM's kernel and backend checks "
        "('Sinks are only supported in FlashAttention 3', 'only supported on Hopper devices', 'only supported on SM75+'), "
        "kernel libraries' 'Unsupported architecture' (DeepGEMM); vllm/distributed/device_communicators/pynccl_wrapper.py "
        "('Failed to load NCCL library from': the library, not the link); torch/cuda, torch/xpu, torch/mtia and "
        "torch_npu _lazy_init (fork); CUDA's cudaErrorInvalidKernelImage as Triton's driver reports it; CANN's ge_api.cc GEInitialize and gelib.cc (graph engine start-up); "
        "torch's op namespaces of vLLM's compiled extensions (_C, _moe_C, _rocm_C: 'object has no attribute' when the "
        "build lacks the op); Triton's fp8 dtype check ('not supported in this architecture'); vLLM's CUTLASS "
        "dispatch ('not implemented for Blackwell'); DeepGEMM's DG_HOST_ASSERT ('Assertion error (...deepgemm...)'); "
        "Ray's raylet store_runner.cc ('/dev/shm' smaller than the object store); vLLM's cutlass_w8a8 "
        "scaled_mm_entry.cu ('No compiled cutlass_scaled_mm'); rocBLAS's Tensile loader; transformers' "
        "integrations/heterogeneity ('AmbiguousGlobalPerLayerAttributeError'); CPython's pickle ('Can't pickle "
        "local object', a transformers_modules class); ptxas and Triton's PTXASError; flashinfer/jit/core.py; c10/cuda/CUDACachingAllocator.cpp (expandable segments with a memory pool); CPython's OSError for EACCES "
        "and EROFS; PyTorch's dispatcher (aten/src/ATen/core/dispatch: 'Could not run ... with arguments from the ... "
        "backend')",
    ),
    Failure(
        "E-HUB",
        # The model's files could not be fetched: the Hub refused the credentials (a gated or private repository, no
        # token), could not be reached (no network, a proxy, TLS, offline mode with nothing cached), or has no such
        # repository. Only raised forms: huggingface_hub retries a request and logs each failed try, and vLLM logs
        # "Error retrieving safetensors" and goes on, so neither is a failure on its own.
        rx(
            r"Cannot access gated repo for url |You are trying to access a gated repo|Access to model \S+ is restricted\."
            r"|We couldn't connect to '?https://huggingface\.co|is not a local folder and is not a valid model identifier"
            r"|^(?:[\w.]+\.)?(?:GatedRepoError|RepositoryNotFoundError|RevisionNotFoundError|LocalEntryNotFoundError"
            r"|OfflineModeIsEnabled|HFValidationError)\b"
            r"|^(?:[\w.]+\.)?(?:MaxRetryError|ConnectTimeout|ConnectionError|SSLError|ReadTimeout|ProxyError)\b.*?"
            r"host='(?:huggingface\.co|hf-mirror\.com|cdn-lfs[\w.-]*|(?:www\.)?modelscope\.cn)'"
        ),
        "environment",
        "environment",
        False,
        70,
        "the model's files could not be fetched from the Hub: a gated or private repository without a token, no "
        "network or proxy to it, TLS, or offline mode with nothing cached; fix access or point at a local copy",
        "OSError: You are trying to access a gated repo.",
        "huggingface_hub/errors.py (GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError, "
        "LocalEntryNotFoundError, OfflineModeIsEnabled; HFValidationError, validate_repo_id's refusal of a name that is "
        "neither a repository id nor an existing folder); transformers/utils/hub.py cached_file ('You are trying to "
        "access a gated repo', 'We couldn't connect to', 'is not a local folder and is not a valid model identifier'); "
        "huggingface_hub/utils/_http.py hf_raise_for_status ('Cannot access gated repo for url', 'Access to model ... "
        "is restricted'); requests/urllib3 connection errors naming the Hub's host",
    ),
    Failure(
        "E-SIGNATURE",
        # CPython's TypeError when a call does not fit the callee's signature: one package calling another of a
        # release whose signature changed (a wrapper and the vLLM it drives, vLLM and a kernel library, a plugin
        # and vLLM). Inside one package it is a bug instead, which the message cannot tell: medium confidence.
        rx(
            r"\w\(\) got an unexpected keyword argument '|got some positional-only arguments passed as keyword"
            r"|\w\(\) missing \d+ required (?:positional|keyword-only) arguments?:"
            r"|\w\(\) takes (?:from )?\d+ (?:to \d+ )?positional arguments? but \d+ (?:were|was) given"
        ),
        "environment",
        "environment",
        False,
        69,
        "a call does not fit the signature of the installed release of what it calls: packages of releases that do "
        "not go together (a wrapper and vLLM, vLLM and a kernel library or plugin)",
        "TypeError: OpenAIServingChat.__init__() got an unexpected keyword argument 'enable_reasoning'",
        "CPython's call-signature TypeErrors (Python/ceval.c, Python/getargs.c: 'got an unexpected keyword argument', "
        "'missing N required positional argument', 'takes N positional arguments but M were given', 'got some "
        "positional-only arguments passed as keyword arguments')",
    ),
    Failure(
        "E-MODELCFG",
        rx(
            r"User-specified max_model_len \(\d+\) is greater than the derived|does not recognize this architecture"
            r"|Unrecognized model in |requires you to execute the configuration file in that repo"
            # the same refusal's second paragraph, on a line of its own (configuration_auto.py AutoConfig.from_pretrained
            # ends its "does not recognize this architecture" ValueError with "\n\nYou can update Transformers ...")
            r"|You can update Transformers with the command `pip install --upgrade transformers`"
            r"|contains custom code which must be executed|Pipeline parallelism is not supported for this model"
            # the model registry's refusal, often quoted without its "ValueError: " (and without the list of
            # supported architectures that follows)
            r"|Model architectures \[[^\]]*\] are not supported for now"
            # tpu-inference's registry (tpu_inference/models/common/model_loader.py, UnsupportedArchitectureError)
            r"|Model architectures \[[^\]]*\] not registered in "
            # the registry's refusal of an architecture it cannot resolve through Transformers either
            # (registry.py _ModelRegistry._try_resolve_transformers, 0.10-0.34)
            r"|is not a registered model in the Transformers library"
            # and of one whose Transformers class the Transformers backend cannot run (registry.py
            # _try_resolve_transformers, model_loader/utils.py resolve_transformers_arch/_fallback, 0.7-0.34)
            r"|The Transformers implementation of \S+ is not compatible with vLLM"
            r"|has no vLLM implementation and the Transformers implementation is not compatible with vLLM"
            # Transformers unable to read the model's config or tokenizer (configuration_utils.py get_config_dict,
            # tokenization_utils_base.py from_pretrained: a wrong name or path, no access, a release too old for it)
            r"|Can't load (?:the configuration|tokenizer) (?:of|for) '"
            # Transformers' file lookup for a model's config, tokenizer or processor file that is not in its folder or
            # repository (utils/hub.py cached_file: "X does not appear to have a file named config.json"); vLLM finds
            # and reads the weights itself and words their absence otherwise
            r"|does not appear to have a file named "
            # and vLLM's own wrapper of that failure (transformers_utils/tokenizer.py get_tokenizer, 0.2-0.5: "Failed to
            # load the tokenizer. If the tokenizer is a custom tokenizer ... consider setting trust_remote_code")
            r"|Failed to load the tokenizer\. If the tokenizer is a custom tokenizer"
            # Transformers unable to build a fast tokenizer from what the checkpoint ships (tokenization_utils_fast.py:
            # "Couldn't instantiate the backend tokenizer from one of: ...": tokenizers or sentencepiece too old or
            # missing for this tokenizer.json)
            r"|Couldn't instantiate the backend tokenizer from one of"
            # an option naming a tool-call or reasoning parser this release does not have (vllm's ToolParserManager
            # and ReasoningParserManager: KeyError "invalid tool call parser: X (chose from { ... })")
            r"|invalid (?:tool call|reasoning) parser: "
            # the model registry inspects a model class in a subprocess (registry.py _run_in_subprocess, 0.6-0.8): it
            # failing means the class cannot be imported or inspected with this installation
            r"|vllm\.model_executor\.models\.registry'\]' returned non-zero exit status"
            # Transformers' AutoModel with no class for the model's config (auto_factory.py from_config: the installed
            # Transformers predates the model, and vLLM fell back to it), and its config classes refusing a field a
            # newer config.json writes (LlamaConfig._rope_scaling_validation, 4.3x, before Llama 3.1's rope_type)
            r"|Unrecognized configuration class <class '[^']+'> for this kind of AutoModel"
            r"|`rope_scaling` must be a dictionary with"
        ),
        "environment",
        "environment",
        False,
        70,
        "the model does not fit this installation or these settings: its type is unknown to the installed "
        "Transformers, it needs trust_remote_code, a config, tokenizer or code file it names is not in its folder or "
        "repository, it has no pipeline-parallel support, or max_model_len exceeds what its config.json allows",
        "ValueError: The checkpoint you are trying to load has model type `qwen3_moe` but Transformers does not "
        "recognize this architecture.",
        "vllm/config/model.py (ModelConfig: _get_and_verify_max_len 'greater than the derived', "
        "verify_with_parallel_config 'SupportsPP'); transformers/models/auto/configuration_auto.py (AutoConfig); "
        "transformers/dynamic_module_utils.py (resolve_trust_remote_code); vllm/model_executor/models/registry.py "
        "(_ModelRegistry._raise_for_unsupported, _try_resolve_transformers); transformers' configuration_utils.py and "
        "tokenization_utils_base.py ('Can't load the configuration of'); transformers/utils/hub.py cached_file ('does "
        "not appear to have a file named'); vllm's ToolParserManager and "
        "ReasoningParserManager ('invalid tool call parser'); transformers' auto_factory.py ('Unrecognized configuration "
        "class') and LlamaConfig._rope_scaling_validation",
    ),
    Failure(
        "E-BACKEND",
        rx(
            r"Selected (?:MLA prefill )?backend \S+ is not valid for this configuration|not supported with VLLM_ATTENTION_BACKEND"
            r"|No operator found for `memory_efficient_attention|xFormers wasn't build with CUDA support"
            r"|No valid attention backend found for"
            # 0.12-0.34 before "No valid ...": each candidate backend's reasons
            r"|Some attention backends are not valid for \w+ with AttentionSelectorConfig"
        ),
        "environment",
        "environment",
        False,
        70,
        "the attention backend refused this GPU, model or settings (FlashAttention/FlashInfer/xFormers): pick "
        "a backend the GPU and build support",
        "ValueError: Selected backend AttentionBackendEnum.FLASHINFER is not valid for this configuration. "
        "Reason: ['attention sinks not supported']",
        "vllm/platforms/cuda.py and rocm.py (get_attn_backend_cls); vllm/engine/arg_utils.py (_raise_or_fallback: "
        "'VLLM_USE_V1=1 is not supported with'; 'No valid attention backend found for', when no backend is "
        "left after the selector's checks, after 'Some attention backends are not valid for'); xformers' dispatcher "
        "('No operator found for')",
    ),
    Failure(
        "E-JITBUILD",
        rx(
            r"cannot find -l\w+|ld returned \d+ exit status|Error building extension '"
            r"|CalledProcessError: Command '\['ninja'|symbol not found in flat namespace"
            # a host C compiler failing on a generated source (triton/runtime/build.py _build: Triton compiles its
            # launcher, main.c / cuda_utils.c, with gcc, clang or its bundled tcc, also under Inductor)
            r"|CalledProcessError: Command '\['[^']*?(?:\bgcc|\bcc|clang|\btcc|g\+\+)(?:\.exe)?', '[^']*?\.c'"
            # the same CalledProcessError quoted without its class, for any host compiler and source (Triton-Ascend
            # precompiling a header with clang++: "Command '['/usr/bin/clang++', '-x', 'c++-header', ...]' returned
            # non-zero exit status 1.")
            r"|Command '\['[^']*?\b(?:clang\+\+|clang|g\+\+|gcc|c\+\+|nvcc|hipcc|ninja)(?:\.exe)?', "
            # ninja's line for a failed build edge ("FAILED: [code=1] out.so" since ninja 1.12): a JIT build
            r"|^FAILED: (?:\[code=\d+\] )?\S+\.(?:so|o|pyd|dylib)\b"
            # a Triton kernel whose tile configuration needs more shared memory than this GPU has (the tuned configs
            # are another GPU's): the kernel cannot launch here, whatever memory is free
            r"|OutOfResources: out of resource: shared memory"
            # HIP's runtime compiler (hiprtc) not loadable, or asked to build with no target architecture
            r"|hip runtime failed to load|Please provide architecture for which code is to be generated"
            # the failing compile command ninja echoes (FlashInfer's and torch's JIT builds), logged as the error
            r"|^:?\S*/nvcc\s+-"
            # libNVVM refusing the options a JIT compiler (CUTLASS's Python DSL, Triton) passed for this GPU
            r"|NVVM_ERROR_[A-Z_]+|libNVVM extra log"
            # LLVM's AMDGPU backend refusing a Triton kernel's stack for this target (ROCm, older gfx)
            r"|stack frame size \(\d+\) exceeds limit"
        ),
        "environment",
        "environment",
        False,
        70,
        "a kernel could not be built or loaded on this host (JIT build of Triton/Inductor/FlashInfer failed "
        "to compile or link, or a compiled library misses a symbol): the toolchain "
        "or installation",
        "/usr/bin/ld: cannot find -lcuda: No such file or directory",
        "GNU ld/collect2 ('cannot find -lX', 'ld returned 1 exit status'); torch/utils/cpp_extension.py "
        "('Error building extension'); FlashInfer's JIT (ninja via subprocess; ninja's 'FAILED: ' line for the "
        "edge that failed); triton/runtime/build.py (the host C compiler building a launcher); macOS dyld ('symbol not found in flat namespace'); triton/runtime/errors.py "
        "(OutOfResources: 'out of resource: shared memory, Required: N, Hardware limit: M'); HIP's hiprtc loader",
    ),
    Failure(
        "E-INSTALL",
        rx(
            # pip's resolver and build front-end (pip/_internal: "ERROR: Could not find a version that satisfies the
            # requirement", "No matching distribution found for", "ResolutionImpossible", the build-backend steps'
            # "subprocess-exited-with-error" / "metadata-generation-failed", "Failed building wheel for")
            r"Could not find a version that satisfies the requirement|No matching distribution found for"
            r"|\bResolutionImpossible\b|because these package versions have conflicting dependencies"
            r"|error: subprocess-exited-with-error|error: metadata-generation-failed|Failed building wheel for \S"
            r"|Failed to build installable wheels|Could not build wheels for"
            r"|did not run successfully\.\s*$"
            # uv ("× Failed to build `vllm==...`", "× No solution found when resolving dependencies")
            r"|Failed to build `|No solution found when resolving dependencies"
            # CMake configuring vLLM's extensions in a source build; vLLM's setup.py on an unsupported OS
            r"|-- Configuring incomplete, errors occurred!|^CMake Error at "
            r"|vLLM only supports Linux platform"
        ),
        "environment",
        "environment",
        False,
        70,
        "vLLM (or a package it needs) could not be installed or built: the package index has no build for this "
        "Python, platform or pin, or a source build failed; no server ever started",
        "ERROR: Could not find a version that satisfies the requirement torch==2.1.2 (from versions: 2.2.0)",
        "pip/_internal (resolver: 'Could not find a version that satisfies the requirement', 'No matching "
        "distribution found for', ResolutionImpossible; build backend: 'subprocess-exited-with-error', "
        "'metadata-generation-failed', 'Failed building wheel for'); uv ('Failed to build `...`', 'No solution found "
        "when resolving dependencies'); CMake ('Configuring incomplete, errors occurred!'); vLLM setup.py "
        "('vLLM only supports Linux platform (including WSL) and MacOS.')",
    ),
    Failure(
        "E-SIGILL",
        rx(r"died unexpectedly \(exit code: -4\)|exit code -4\b|Illegal instruction|\bSIGILL\b"),
        "environment",
        "environment",
        False,
        71,
        "a process died of an illegal instruction (SIGILL): the vLLM/torch build uses CPU instructions this host "
        "does not execute (a build for another CPU, or a VM whose CPU features changed)",
        "Worker proc VllmWorker-0 died unexpectedly (exit code: -4), shutting down executor.",
        "vllm/v1/executor/multiproc_executor.py (worker monitor); signal 4 is SIGILL (signal(7))",
    ),
)
