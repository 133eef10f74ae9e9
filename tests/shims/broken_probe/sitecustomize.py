"""Test-only shim: a probe whose step accounting raises, to show training goes on without it.

Put this directory on PYTHONPATH behind the run's own sitecustomize; that one chains here.
"""

from zerodoctor.probe.engine import EngineProbe


def _broken_after_step(self, *args):
    raise RuntimeError("injected probe failure")


EngineProbe._after_step = _broken_after_step
