"""Which named model a person's turns use now, and what a schedule keeps.

A person's `/model` choice is an endpoint's name (panager/endpoints.py), or a model
id stored before endpoints had names; either way it is honoured only while the
person may still use it (admins: any; others: `allowed_models`, else the default).
An agent schedule or briefing keeps the model its creator used when it was set
up, and is checked the same way at every run.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from panager.endpoints import model_endpoints

if TYPE_CHECKING:
    from panager.agent.deps import AgentDeps
    from panager.services.users import User

PIN_REFUSED = (
    "run on {default}: {pinned}, the model this was set up with, is not available to you now"
)


def current_model(deps: AgentDeps, user: User) -> str:
    """The endpoint name the person's turns use now."""
    endpoints = model_endpoints(deps.settings)
    chosen = replace(user, model=endpoints.canonical(user.model))
    return deps.access.model_of(chosen, endpoints.default, endpoints.allowed)


def pinned_for_run(deps: AgentDeps, user: User, pinned: str) -> tuple[User, str | None]:
    """The person as a scheduled run sees them (their model: the pinned one), and a note
    when the pin is no longer allowed (the run then uses the default)."""
    endpoints = model_endpoints(deps.settings)
    name = endpoints.canonical(pinned) or pinned
    runs_on = current_model(deps, replace(user, model=name))
    if runs_on == name:
        return replace(user, model=name), None
    return replace(user, model=None), PIN_REFUSED.format(default=runs_on, pinned=name)
