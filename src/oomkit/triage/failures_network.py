"""Failure signatures of the network: collectives and their libraries (NCCL, RCCL, HCCL, gloo, PyTorch's
distributed), and the KV connectors' transfers (`failures.py` splices them in after the memory ones, before the
environment's)."""

from __future__ import annotations

from oomkit.triage.rules import Failure, V, rx

# vLLM's custom/quick all-reduce kernels' CUDACHECK ("Failed: Cuda error FILE:LINE 'text'", then exit); where it
# lands (the link, or graph capture) is verdict_explicit.py's.
CUSTOM_ALLREDUCE = rx(r"Cuda error \S*(?:custom_all_reduce|quick_?reduce|quick_all_reduce)\S*:\d+ '")

NETWORK_FAILURES: tuple[Failure, ...] = (
    Failure(
        "E-RPCUTIL",
        # A running engine's `collective_rpc` utility call failing (vllm/v1/engine/core.py logs the exception of a
        # client's utility call and serves on). Trainers call it to build and use the weight-sync communicator between
        # the trainer and vLLM's workers (TRL's vllm_serve init_communicator, verl, OpenRLHF, NeMo-RL): `low`
        # (verdict_explicit.py), and any other failure line outranks it.
        rx(r"Invocation of collective_rpc method failed"),
        "network",
        "network_communication",
        False,
        50,  # the lowest rank a verdict rests on: every other failure line outranks it
        "a collective_rpc call on the running engine failed: trainers set up and use their weight-sync "
        "communicator (NCCL between trainer and workers) this way; the worker's traceback has the cause",
        "(EngineCore_DP0 pid=7121) ERROR 01-12 17:24:20 [core.py:769] Invocation of collective_rpc method failed",
        "vllm/v1/engine/core.py EngineCoreProc._handle_client_request / _invoke_utility_method "
        "(logger.exception 'Invocation of %s method failed', 0.8-0.34); trl/scripts/vllm_serve.py init_communicator "
        "(collective_rpc into PyNcclCommunicator/StatelessProcessGroup)",
    ),
    Failure(
        "E-NCCL",
        rx(
            r"NCCL error|NCCL Error \d+:|ncclSystemError|ncclInternalError|ncclUnhandledCudaError|ncclRemoteError|ncclInvalidUsage|NCCL WARN|DistBackendError|DistNetworkError|Watchdog caught collective operation timeout|Gloo connectFullMesh failed|mlx5dv_reg_dmabuf_mr|ibv_(?:reg_mr|create_qp|modify_qp)|The client socket has (?:failed to connect|timed out)|TCPStore.*(?:timed out|refused|is not available)|DistStoreError|Timed out waiting \d+ms for (?:send|recv) operation|Connection closed by peer \[\d|waiting for clients\. \d+/\d+ clients joined"
            # ("TCPStore is not available": the store cupy's NCCL communicator rendezvoused through, vLLM 0.3's graph
            # all-reduce, cupyx/distributed/_store.py)
            # c10d's TCPStore client losing its server (torch/csrc/distributed/c10d/Utils.hpp recvBytes)
            r"|Failed to recv, got 0 bytes|recvValue failed on SocketImpl"
            # ProcessGroupNCCL's watchdog printing the Python stack of the collective it found failed or hung (flight
            # recorder, torch >= 2.6: "Stack trace of the failed collective: #0 broadcast from ..."), or saying it has
            # none to print; either way a collective failed, whichever lines an excerpt kept around it
            r"|ProcessGroupNCCL\.cpp:\d+\] Stack trace of the failed collective\b"
            # and its socket wait expiring (torch/csrc/distributed/c10d/socket.cpp waitForInput: "socket ... timed out
            # after 1800000ms", "poll for socket ... returned 0, likely a timeout"); HCCL's socket wait (Ascend CANN
            # EI0006 "Get_Socket_Timeout": the remote rank never connected) is one of its EI codes, below
            r"|\[c10d\] waitForInput: (?:socket .{0,200}timed out after \d+ ?ms|poll for socket .{0,200}likely a timeout)"
            # rdma-core's mlx5 provider on a work completion with an error status (an InfiniBand/RoCE transfer failed)
            r"|mlx5: [\w.-]+: got completion with error"
            # vLLM's custom/quick all-reduce kernels (csrc/custom_all_reduce.cuh, quickreduce): CUDACHECK prints
            # "Failed: Cuda error FILE:LINE 'text'" and exits; their IPC buffers fail across nodes or without P2P
            rf"|{CUSTOM_ALLREDUCE.pattern}"
            # CUDA's peer-to-peer errors (cudaErrorPeerAccessUnsupported/NotEnabled/AlreadyEnabled): the GPUs cannot
            # map each other's memory, which custom all-reduce and NCCL's P2P transport need (PCIe topology, IOMMU/ACS,
            # a driver or VM that refuses P2P); worded as a refusal, but the link, not a setting
            r"|peer access is not supported between these two devices|peer access (?:has not been|is already) enabled"
            r"|cudaErrorPeerAccess\w+"
            # Kunlunxin's collective library under vLLM-Kunlun, as HCCL is Ascend's: XCCL's set-up of the chip-to-chip
            # address window failing ("[XCCL][init.cpp:1227] host ... addr_window check failed"; literal wording: an
            # open-ended scan of every XCCL line slowed the stats-heavy benchmark by a fifth)
            r"|\baddr_window (?:check failed|not properly set)"
            # PyTorch's NCCL heartbeat monitor: the watchdog itself hung in a collective (ProcessGroupNCCL.cpp)
            r"|Heartbeat monitor timed out|watchdog got stuck for \d+ seconds"
            # a native crash whose faulting function is NCCL's (abseil's signal handler, via Ray, prints the PC's
            # symbol: "PC: @ 0x7f0c73d2944a (unknown) addProxyOpIfNeeded()"): the collective's transport failed
            r"|PC: @ +0x[0-9a-f]+ .*\b(?:nccl\w+|addProxyOpIfNeeded|ncclProxy\w*)\(\)"
            # HCCL, Ascend's collective library, as torch_npu and LMCache-Ascend report its failures (ERR02200 "DIST
            # call hccl api failed", "HCCL Error Code: N", a communicator that could not be created)
            r"|DIST call hccl api failed|HCCL Error Code: \d+|hcclCommInitRootInfo\w* .*error code"
            # CuPy's NCCL binding (vLLM 0.3's CUDA-graph all-reduce): "NcclError: NCCL_ERROR_INVALID_USAGE: invalid usage"
            r"|NcclError: NCCL_ERROR_\w+"
            # a rendezvous or IPC port already taken: c10d's TCPStore server (torch/csrc/distributed/c10d/socket.cpp:
            # "The server socket has failed to listen on any local network address. ... EADDRINUSE") and the ZMQ sockets
            # vLLM's API server and engine cores talk over (vllm/utils zmq make_zmq_socket; ports picked before bind)
            r"|The server socket has failed to listen on any local network address|ZMQError: Address already in use"
            # HCCL's own errors as CANN reports them: its error codes are the EI family ("Allocation_Failure(EI0007)",
            # "Get_Socket_Timeout(EI0006)"), its plog lines carry the module name ("[ERROR] HCCL(893240,):..."), and a
            # collective task the device waited out ("hccl fftsplus task timeout occurred during task execution")
            r"|\b\w+\(EI\d{4}\)|\[ERROR\] HCCL\(\d+|hccl \w+ task timeout"
            # and the device's own report of that wait (CANN's device_error_proc: "notify wait timeout occurred during
            # task execution"): a notify is how HCCL's ranks signal each other
            r"|notify wait timeout occurred during task execution"
            # gloo's transport refusing to start (gloo/transport/tcp/device.cc: "[enforce fail at
            # .../gloo/transport/tcp/device.cc:83] ifa != nullptr. Unable to find address for: eth0")
            r"|enforce fail at \S*gloo/transport/"
            # DeepEP and NVSHMEM, the expert-parallel all-to-all libraries: their CUDA_CHECK/EP_HOST_ASSERT print
            # "Failed: CUDA error /.../DeepEP/csrc/deep_ep.cpp:226 'invalid resource handle'" as their buffers are
            # set up or exchanged across ranks
            r"|Failed: (?:CUDA|Assertion) error \S*(?:[Dd]eep_?[Ee][Pp]|nvshmem)\S*:\d+"
            # a Ray worker or driver that cannot reach the cluster's GCS (Ray's gcs_client / services.py)
            r"|Failed to connect to GCS at address|Timed out while waiting for GCS to become available"
        ),
        "network",
        "network_communication",
        False,
        78,
        "collective communication failed (NCCL/Gloo/RDMA): not a capacity problem",
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1, unhandled system error",
        f"{V} §3 E-NCCL/E-NCCLWD; recipe note on mlx5dv_reg_dmabuf_mr; PyTorch c10d TCPStore server "
        "('Timed out after N seconds waiting for clients. M/W clients joined.')"
        "; rdma-core providers/mlx5 ('mlx5: HOST: got completion with error:'); vLLM csrc/custom_all_reduce.cuh "
        "CUDACHECK ('Failed: Cuda error %s:%d '%s''); abseil failure_signal_handler.cc's 'PC: @' line with an NCCL "
        "symbol; torch_npu's ERR02200 and HCCL error codes (Ascend); cupy_backends/cuda/libs/nccl.pyx (NcclError); "
        "c10d socket.cpp (a TCPStore port in use) and pyzmq's ZMQError on vLLM's engine sockets; CANN's HCCL error "
        "codes (EI*), plog module tags and fftsplus task timeouts; gloo/transport/tcp/device.cc; DeepEP csrc "
        "(CUDA_CHECK/EP_HOST_ASSERT: 'Failed: CUDA error FILE:LINE'); Ray gcs_client ('Failed to connect to GCS')",
        excludes=("E-CPUALLOC",),
    ),  # "ibv_reg_mr failed: Cannot allocate memory" is pinned memory (memlock), not host RAM
    Failure(
        "E-NCCLINIT",
        # NCCL_DEBUG=INFO's lines ("host:pid:tid [dev] NCCL INFO Bootstrap : Using eno1", "... Channel 00/02",
        # "... Init START") print while a communicator is being set up (init.cc, bootstrap.cc, transport/*.cc): a log
        # that ends in them, with nothing after, is a start that hangs in that set-up (a peer that never joins, P2P
        # or a NIC that does not answer). A wait: any later marker drops it. Teardown ("Destroy COMPLETE", "Abort
        # COMPLETE") and NCCL's error traces ("group.cc:64 -> 1") are not set-up.
        rx(r"\] NCCL INFO (?!.*(?:Destroy|Abort) COMPLETE|.* -> \d)"),
        "stall",
        "timeout",
        False,
        50,
        "the log ends while NCCL sets up a communicator: the start hangs there (a rank that never joins, PCIe P2P "
        "or a network interface that does not answer); try NCCL_P2P_DISABLE=1, NCCL_SOCKET_IFNAME, or check every "
        "rank's log",
        "osprey1:1927386:1927386 [0] NCCL INFO Bootstrap : Using eno1:128.174.136.27<0>",
        "NCCL src/init.cc, src/bootstrap.cc, src/transport/*.cc (INFO(NCCL_INIT...) with NCCL_DEBUG=INFO)",
    ),
    Failure(
        "E-SIGBUS",
        # SIGBUS: a mapped page the kernel cannot back. Under vLLM that is shared memory run out (a container's 64 MB
        # /dev/shm): NCCL's intra-node shm transport and vLLM's shm_broadcast queues map their segments there as the
        # workers start; a truncated memory-mapped checkpoint does the same while loading (verdict_explicit.py).
        rx(r"Fatal Python error: Bus error|\*\*\* SIGBUS received at time=|\bBus error \(core dumped\)"),
        "network",
        "network_communication",
        False,
        69,  # above E-ILLEGAL: "core dumped" on the same line is the same signal
        "a worker died of SIGBUS: the shared memory its collectives map (/dev/shm) ran out; give the container "
        "more (docker --shm-size, a memory-backed emptyDir in Kubernetes) or set NCCL_SHM_DISABLE=1",
        "(RayWorker pid=1451) Fatal Python error: Bus error",
        "CPython faulthandler ('Fatal Python error: Bus error'); abseil failure_signal_handler.cc (via Ray); NCCL's "
        "shm transport (src/transport/shm.cc) and vllm/distributed/device_communicators/shm_broadcast.py map /dev/shm",
        excludes=("E-ILLEGAL",),
    ),
    Failure(
        "E-KVXFER",
        rx(
            # Mooncake's transfer engine and store (glog lines: transfer_task.cpp, transfer_metadata.cpp, client.cpp,
            # master_client.cpp), NIXL's status codes: the KV-cache transfer between instances failed
            r"Failed to (?:open|mount) segment|Failed to submit transfer operation|Failed to retrieve segment descriptor"
            r"|\bNIXL_ERR_[A-Z_]+"
            # a socket bound to an address that is not this host's (EADDRNOTAVAIL): VLLM_HOST_IP, the DP master or
            # a connector's address names another node
            r"|Cannot assign requested address"
            # the connectors' own reports of a failed pull or handshake (vLLM's nixl and mooncake connectors,
            # vllm-ascend's mooncake connector, Mooncake's Python transfer engine)
            r"|NIXL transfer failure|Remote NIXL agent engine ID mismatch|NIXL compatibility hash mismatch"
            r"|Mooncake transfer failed|MooncakeXferMetadata transfer failed|pulling kv_caches for \S+ failed"
            r"|Error happens during trans\w+ kvcache|Failed to connect to bootstrap server|Sync batch data transfer timeout"
            # vLLM's nixl and MoRIIO connectors when the handshake with the remote engine fails (logger.exception
            # "Handshake with %s failed", "Eager MoRIIO handshake failed for %s")
            r"|Handshake with \S+ failed|MoRIIO handshake failed"
        ),
        "network",
        "network_communication",
        False,
        77,
        "a connection between instances failed: a KV-cache transfer (Mooncake, NIXL) or a socket bound to an "
        "address that is not this host's",
        "E0904 21:29:13.608029 31963 transfer_task.cpp:469] Failed to open segment 192.168.10.12:12516",
        "Mooncake transfer engine (transfer_task.cpp, transfer_metadata.cpp, client.cpp) and store "
        "(master_client.cpp); NIXL's nixl_status_t names (NIXL_ERR_*); errno EADDRNOTAVAIL's strerror "
        "(zmq bind in vllm/utils make_zmq_socket); vllm/distributed/kv_transfer/kv_connector/v1 nixl and mooncake "
        "connectors (logger.error / raise), vllm-ascend's mooncake_connector, Mooncake transfer_engine_py.cpp",
    ),
)
