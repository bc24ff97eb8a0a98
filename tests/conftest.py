"""Fixtures every test directory may use: this session's Podman and the container images the
tests run tasks in (``tests/images.py``)."""

from tests.images import busybox_image, podman_engine, podman_env, podman_storage, torch_image

__all__ = ["busybox_image", "podman_engine", "podman_env", "podman_storage", "torch_image"]
