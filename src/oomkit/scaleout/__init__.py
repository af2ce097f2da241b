"""Work beyond one process: sweeps of independent cells over local processes or a Ray cluster."""

from oomkit.scaleout.cells import Backend, CellOutcome, run_cells
from oomkit.scaleout.ray_backend import RayTarget

__all__ = ["Backend", "CellOutcome", "RayTarget", "run_cells"]
