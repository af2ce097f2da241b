"""Agent workloads: the YAML spec, its materialisation into a request set (JSONL with content
hashes) that later runs reuse unchanged, and token counting with the server's tokenizer."""

from oomkit.workload.materialise import materialise
from oomkit.workload.requestset import RequestSet, SetRequest, read_request_set
from oomkit.workload.spec import Workload, load_workload, parse_workload
from oomkit.workload.tokens import ApproxCounter, ServerCounter, TokenCounter, server_counter

__all__ = [
    "ApproxCounter",
    "RequestSet",
    "ServerCounter",
    "SetRequest",
    "TokenCounter",
    "Workload",
    "load_workload",
    "materialise",
    "parse_workload",
    "read_request_set",
    "server_counter",
]
