"""Start vLLM from a launch profile into a run folder, follow every startup phase, stop it cleanly.

from oomkit.launch import load_profile, launched
with launched("examples/testbed-healthy.yaml") as server:   # ready, or LaunchFailed (a RunFailed)
    server.base_url, server.run_dir, server.log_path, server.pid, server.alive(), server.triage()
"""

from oomkit.launch.check import CheckResult, RequestCheck, check_profile
from oomkit.launch.follow import PhaseReached
from oomkit.launch.foreground import StopOutcome, serve, stop_run
from oomkit.launch.profile import Profile, Start, load_profile, parse_profile
from oomkit.launch.runner import StopReport
from oomkit.launch.server import Event, LaunchFailed, LaunchResult, Server, StopRequested, launched

__all__ = [
    "CheckResult",
    "Event",
    "LaunchFailed",
    "LaunchResult",
    "PhaseReached",
    "Profile",
    "RequestCheck",
    "Server",
    "Start",
    "StopOutcome",
    "StopReport",
    "StopRequested",
    "check_profile",
    "launched",
    "load_profile",
    "parse_profile",
    "serve",
    "stop_run",
]
