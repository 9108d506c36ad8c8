"""The provider contract suite (contract.py) run on every provider in drivers.DRIVERS (the
mail cases on those that declare mail, drivers.MAIL_DRIVERS)."""

from __future__ import annotations

import pytest

from tests.providers.contract import *  # noqa: F403 — the suite's tests, collected here
from tests.providers.drivers import (  # noqa: F401
    DRIVERS,
    MAIL_DRIVERS,
    caldav_radicale_driver,
    caldav_xandikos_driver,
    google_driver,
    memory_driver,
)

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=list(DRIVERS))
def driver(request):
    """One provider with one connected account (see drivers.py)."""
    return request.getfixturevalue(DRIVERS[request.param])


@pytest.fixture(params=list(MAIL_DRIVERS))
def mail_driver(request):
    """One provider that declares mail, with one connected account (see drivers.py)."""
    return request.getfixturevalue(MAIL_DRIVERS[request.param])
