"""Fakes what tf_ops's GPU loader sees, for a child Python process on a machine
without a GPU: the GPUs TensorFlow lists and the NVIDIA driver library.

The loader asks `tf.config.list_physical_devices("GPU")` and
`tf.config.experimental.get_device_details` for the GPUs, and `ctypes.CDLL("libcuda.so.1")`
for the driver; `install` replaces those three at their source, so everything between
them and the loading decision is the production code. Call it after importing
tensorflow and before importing tf_ops; calling it again replaces the fakes.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

import tensorflow as tf

DRIVER_LIBRARY = "libcuda.so.1"

_real = {
    "list": tf.config.list_physical_devices,
    "details": tf.config.experimental.get_device_details,
    "cdll": ctypes.CDLL,
}


def install(gpus: list[tuple[str, tuple[int, int]]], driver: str | None) -> None:
    """Makes TensorFlow list `gpus` ((name, compute capability) each) and makes
    `ctypes.CDLL("libcuda.so.1")` load `driver` instead (None: fail as without a driver)."""
    devices = [
        tf.config.PhysicalDevice(f"/physical_device:GPU:{i}", "GPU") for i in range(len(gpus))
    ]
    details = {
        d: {"device_name": name, "compute_capability": cc} for d, (name, cc) in zip(devices, gpus)
    }

    def list_physical_devices(device_type=None):
        if device_type == "GPU":
            return list(devices)
        return _real["list"](device_type) + (list(devices) if device_type is None else [])

    def get_device_details(device):
        return dict(details[device]) if device in details else _real["details"](device)

    class CDLL(_real["cdll"]):
        def __init__(self, name, *args, **kwargs):
            if name == DRIVER_LIBRARY:
                name = driver or f"/nonexistent/{DRIVER_LIBRARY}"
            super().__init__(name, *args, **kwargs)

    tf.config.list_physical_devices = list_physical_devices
    tf.config.experimental.get_device_details = get_device_details
    ctypes.CDLL = CDLL


def uninstall() -> None:
    """Puts the real functions back."""
    tf.config.list_physical_devices = _real["list"]
    tf.config.experimental.get_device_details = _real["details"]
    ctypes.CDLL = _real["cdll"]


def build_driver(directory: str, version: int, result: int = 0) -> str:
    """Compiles a stand-in driver library whose cuDriverGetVersion reports `version`
    (1000 * major + 10 * minor) and returns `result` (0: CUDA_SUCCESS); returns its path."""
    path = os.path.join(directory, f"libcuda-{version}-{result}.so")
    source = (
        "int cuDriverGetVersion(int* version) " f"{{ *version = {version}; return {result}; }}\n"
    )
    compiler = shutil.which("cc") or shutil.which("gcc") or "c++"
    subprocess.run(
        [compiler, "-shared", "-fPIC", "-x", "c", "-", "-o", path],
        input=source,
        text=True,
        check=True,
    )
    return path
