"""Hydra's own launcher test suites against the Beaker launcher, with the Beaker service faked at the
client: each job's task command really runs (here, as a one-node Beaker would run it) and the launcher
follows it and reads its result back.

Run by tests/test_beaker_suite.py in a fresh process: the suites assume no Hydra app in the process
has chosen a version_base yet, which other tests of a session do (Hydra's BasicLauncher fails them
too after such a test). It runs in a temporary folder of the parent test, where its results go."""

import os

import pytest
from hydra.test_utils.launcher_common_tests import BatchedSweeperTestSuite, LauncherTestSuite

from test_beaker import FakeBeaker

RESULTS = os.path.abspath("beaker-results")
os.makedirs(RESULTS, exist_ok=True)
OVERRIDES = ["hydra.launcher.workspace=ai2/olmocr", "hydra.launcher.budget=ai2/oe-base",
             "hydra.launcher.image=me/olmocr", "hydra.launcher.require_clean_git=false", "hydra.launcher.wait=true",
             f"hydra.launcher.result_path={RESULTS}"]


@pytest.fixture(autouse=True)
def fake_beaker(monkeypatch):
    import beaker

    fake = FakeBeaker(run=True)
    monkeypatch.setattr(beaker.Beaker, "from_env", classmethod(lambda cls, **kw: fake))
    return fake


@pytest.mark.parametrize("launcher_name, overrides", [("beaker", list(OVERRIDES))])
class TestBeakerLauncher(LauncherTestSuite):
    pass


# The suite extends the list it is given, so it gets its own; batches of 2 as Hydra's plugins test them.
@pytest.mark.parametrize("launcher_name, overrides", [("beaker", [*OVERRIDES, "hydra.sweeper.max_batch_size=2"])])
class TestBeakerLauncherBatched(BatchedSweeperTestSuite):
    pass
