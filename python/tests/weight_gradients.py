"""Shared by the fine-tuning tests: gradients against named weights checked
by central finite differences."""
import numpy as np
import pytest


def check_against_finite_differences(loss, weights, grads, names, rel, abs_, eps=1e-2, count=3):
    """For each weight in ``names``, the ``count`` largest elements of its
    gradient ``grads[name]`` against (loss(w + eps) - loss(w - eps)) / 2 eps,
    where ``loss(weights)`` is a scalar."""
    for name in names:
        g = np.asarray(grads[name]).ravel()
        for i in np.argsort(-np.abs(g))[:count]:
            plus, minus = dict(weights), dict(weights)
            plus[name] = weights[name].copy()
            minus[name] = weights[name].copy()
            plus[name].ravel()[i] += eps
            minus[name].ravel()[i] -= eps
            fd = (float(np.asarray(loss(plus))) - float(np.asarray(loss(minus)))) / (2 * eps)
            assert g[i] == pytest.approx(fd, rel=rel, abs=abs_), (name, i)
