"""`gpuplan serve`: the live dashboard (FastAPI), its Prometheus metrics and the what-if view.

Importing this package imports nothing heavy; `gpuplan.web.app` pulls in FastAPI.
"""

__all__: list[str] = []
