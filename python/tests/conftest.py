"""Shared fixtures: every test starts from the same seed and with grad mode on."""
import pytest

import ember


@pytest.fixture(autouse=True)
def _fresh_state():
    ember.manual_seed(0)
    ember.set_grad_enabled(True)
    yield
