"""float64 NumPy references of the softmax family (tf_ops/cc/softmax/softmax_math.h)."""

from __future__ import annotations

import numpy as np


def softmax(x: np.ndarray, log: bool = False) -> np.ndarray:
    x = np.asarray(x, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        m = np.max(x, axis=-1, keepdims=True)
        s = np.sum(np.exp(x - m), axis=-1, keepdims=True)
        return x - m - np.log(s) if log else np.exp(x - m) / s


def masked_softmax(x: np.ndarray, kept: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """softmax(scale x) over kept positions, 0 elsewhere, zeros where nothing is kept."""
    x = np.asarray(x, np.float64) * scale
    kept = np.broadcast_to(kept, x.shape)
    v = np.where(kept, x, -np.inf)
    m = np.max(v, axis=-1, keepdims=True)
    empty = ~np.isfinite(m) & (m < 0)
    with np.errstate(invalid="ignore"):
        e = np.where(kept, np.exp(v - np.where(empty, 0.0, m)), 0.0)
        y = e / np.sum(e, axis=-1, keepdims=True)
    return np.where(kept & ~empty, y, 0.0)


def causal(q: int, k: int) -> np.ndarray:
    return np.arange(k)[None, :] <= np.arange(q)[:, None]


def cross_entropy(x: np.ndarray, labels: np.ndarray, eps: float = 0.0, ignore: int = -100,
                  z: float = 0.0):
    """(loss [rows], dlogits [rows, classes])."""
    x = np.asarray(x, np.float64)
    labels = np.asarray(labels)
    rows, c = x.shape
    ignored = labels == ignore
    safe = np.where(ignored, 0, labels)
    m = x.max(-1)
    lse = m + np.log(np.exp(x - m[:, None]).sum(-1))
    loss = lse - (1 - eps) * x[np.arange(rows), safe] - eps / c * x.sum(-1) + z * lse**2
    p = np.exp(x - lse[:, None])
    target = (1 - eps) * np.eye(c)[safe] + eps / c
    dx = p * (1 + 2 * z * lse)[:, None] - target
    return np.where(ignored, 0.0, loss), np.where(ignored[:, None], 0.0, dx)
