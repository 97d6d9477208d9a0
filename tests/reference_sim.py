"""The plain-Python reference simulator lives in the package (``fastsim.sim.reference``)."""
from fastsim.sim.reference import simulate_reference  # noqa: F401
