"""A lost GPU device (destroy() natively; Chromium's is in tests/browser/test_training.py):
a trainer made with recover_every continues on a new device from its last host copy,
one without raises DeviceLost naming the loss."""

from __future__ import annotations

import numpy as np
import pytest

from tgweb import samples
from tgweb.backends import native
from tgweb.backends.base import DeviceLost
from tgweb.samples import sin

pytestmark = pytest.mark.native


def _trainer(**kw):
    return samples.compile(sin, **kw)


def test_training_continues_on_a_new_device_from_the_last_host_copy():
    tr, ref = _trainer(backend="native", recover_every=5), _trainer(backend="reference")
    for i in range(7):
        tr.step(**sin.batch(i))
        ref.step(**sin.batch(i))
    native._device().destroy()
    r = tr.step(**sin.batch(7))
    assert not r.ok and r.step == 5 and np.isnan(r.loss)
    assert "device was lost" in r.reason and "from step 5 (2 applied step(s)" in r.reason
    ref2 = _trainer(backend="reference")  # the same 5 steps, then the same 7 more
    for i in list(range(5)) + list(range(5, 12)):
        ref2.step(**sin.batch(i))
    for i in range(5, 12):
        tr.step(**sin.batch(i))
    assert tr.steps == ref2.steps == 12
    for n, v in ref2.params().items():
        np.testing.assert_allclose(tr.params()[n], v, rtol=1e-5, atol=1e-6, err_msg=n)


def test_without_recover_every_a_lost_device_is_an_error_naming_it():
    tr = _trainer(backend="native")
    tr.step(**sin.batch(0))
    native._device().destroy()
    with pytest.raises(DeviceLost, match="device was lost"):
        tr.step(**sin.batch(1))
    tr2 = _trainer(backend="native")  # the next trainer gets a new device
    assert np.isfinite(tr2.step(**sin.batch(0)).loss)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "5"])
def test_recover_every_is_checked(bad):
    with pytest.raises(ValueError, match="recover_every"):
        _trainer(backend="reference", recover_every=bad)
