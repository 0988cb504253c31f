"""The MST web service: a FastAPI app whose worker processes keep graphs resident on GPUs.

Start it with ``python -m service`` (settings from ``MST_*`` variables, see
:class:`service.settings.Settings`); talk to it with :class:`service.client.Client`.
"""

__version__ = "0.1.0"
__all__ = ["__version__"]
