"""Experiment tests: a team with a member; no event handlers but the recorder's."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from trainhub.tenancy.choices import Role

from ..event_capture import HANDLER
from ..factories import make_team, make_user


@pytest.fixture(autouse=True)
def _events_to_the_recorder_only(settings: Any) -> None:
    settings.EVENT_HANDLERS = [HANDLER]


@pytest.fixture
def alice(db: None) -> User:
    user = make_user("alice")
    make_team("recsys", members={user: Role.MEMBER})
    return user
