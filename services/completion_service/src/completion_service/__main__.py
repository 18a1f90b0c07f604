"""``python -m completion_service``: serve the API with settings from ``COMPLETION_*`` variables."""

from __future__ import annotations

from completion_service.app import create_app
from completion_service.settings import CompletionSettings
from suite_common.startup import run_service

__all__ = ["main"]


def main() -> None:
    # ValueError: a model catalog or a provider setting the app cannot be built with (CatalogError is one).
    run_service(CompletionSettings, create_app, prog="completion-service")


if __name__ == "__main__":
    main()
