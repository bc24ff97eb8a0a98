"""Fixtures every test directory may use: this session's Podman and the container image the
end-to-end tests run tasks in (``tests/images.py``)."""

from tests.images import podman_env, podman_storage, torch_image

__all__ = ["podman_env", "podman_storage", "torch_image"]
