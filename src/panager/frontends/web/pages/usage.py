"""Usage: tokens per day and per model for the last 30 days, with the daily budget."""

from __future__ import annotations

from aiohttp import web

from panager.endpoints import model_endpoints
from panager.frontends.web.charts import bar_chart, model_colours
from panager.frontends.web.pages import page
from panager.frontends.web.render import render
from panager.services.usage import daily
from panager.services.web_sessions import WebSession

DAYS = 30


def daily_budget(settings) -> int | None:
    """The per-user daily token cap in force, if any (config key or token_budget effect)."""
    runtime = settings.runtime
    for spec in runtime.effects or []:
        if spec.kind == "token_budget" and spec.params.get("daily_tokens"):
            return int(spec.params["daily_tokens"])
    return runtime.daily_token_budget


class UsagePage:
    """GET /usage."""

    def __init__(self, app) -> None:
        self.app = app

    def routes(self, gate) -> list[web.RouteDef]:
        """The page's routes."""
        return [web.get("/usage", gate.page(self.index))]

    async def index(self, request: web.Request, session: WebSession) -> web.Response:
        """The chart and a per-model table."""
        days = await daily(self.app.deps.usage, session.user, DAYS)
        costs = month_costs(self.app.settings, await self.app.deps.usage.report(session.user))
        budget = daily_budget(self.app.settings)
        per_model: dict[str, int] = {}
        for day in days:
            for model, tokens in day.by_model.items():
                per_model[model] = per_model.get(model, 0) + tokens
        return render("usage.html", **page(
            session, "usage", "Usage", request, chart=bar_chart(days, budget),
            colours=model_colours(days),
            per_model=sorted(per_model.items(), key=lambda kv: -kv[1]),
            total=sum(per_model.values()), today=days[-1].total if days else 0, budget=budget,
            days=DAYS, costs=costs))


def month_costs(settings, report) -> dict[str, str]:
    """This month's cost per model, where its endpoint has a `price_per_mtok`."""
    costs = {}
    for row in report.month:
        endpoint = model_endpoints(settings).resolve(row.model)
        cost = endpoint.cost(row.prompt, row.completion) if endpoint is not None else None
        if cost is not None:
            costs[row.model] = f"{cost:,.2f}"
    return costs
