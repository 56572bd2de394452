"""Role-level routing (`roles: {challenger: {model: LABEL}}`): one role's calls go to another model."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from autogen_core.models import ChatCompletionClient

from medpanel.agents.model.client import Gate, QuestionSession
from medpanel.agents.model.spec import ModelSpec


@dataclass
class RoleRoute:
    """Where one role's calls go: the model's label, its settings, its client, its gate."""

    label: str
    spec: ModelSpec
    inner: ChatCompletionClient
    before_call: Gate | None = None


def for_role(session: QuestionSession, role: str) -> QuestionSession:
    """The session as `role` sees it: its routed model if it has one. Events, hooks and the cache stay
    shared (the same objects), so the question's transcript holds every call in order."""
    route = session.routes.get(role)
    if route is None:
        return session
    assert isinstance(route, RoleRoute)
    return dataclasses.replace(session, spec=route.spec, inner=route.inner, label=route.label,
                               before_call=route.before_call or session.before_call, routes={})
