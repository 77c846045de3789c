"""Glue between pyinfra's ``host`` and the spec, for ``deploy.py`` (``rigkit deploy`` itself,
which runs pyinfra and then the smoke, lives in :mod:`rigkit.cli`)."""

from __future__ import annotations

from typing import Any

from pyinfra.api import DeployError

from rigkit.inventory import data_layers
from rigkit.spec import RigSpec, SpecError
from rigkit.validate import spec_from_layers


def spec_for(host: Any) -> RigSpec:
    """The validated RigSpec of a pyinfra ``host`` (its data layers, deep-merged). Raises
    ``DeployError`` listing every problem, so pyinfra stops before any operation."""
    try:
        return spec_from_layers(data_layers(host), source=f"spec of host {host.name}")
    except SpecError as exc:
        raise DeployError(str(exc)) from None
