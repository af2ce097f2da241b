"""`oomkit forecast`: the ladder's figures for a layout, from vLLM's own v1 Scheduler and KV-cache
manager (the installed vLLM, imported only when a forecast runs) on the planner's KV pool, driven by
a synthetic executor on a virtual clock. `forecast(ForecastRequest(...))` is the entry point."""

from oomkit.forecast.inputs import plan_request
from oomkit.forecast.render import render
from oomkit.forecast.result import Forecast, LayoutForecast, RungForecast
from oomkit.forecast.run import ForecastRequest, forecast

__all__ = ["Forecast", "ForecastRequest", "LayoutForecast", "RungForecast", "forecast", "plan_request", "render"]
