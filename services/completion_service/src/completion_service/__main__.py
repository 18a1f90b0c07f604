"""``python -m completion_service``: serve the API with settings from ``COMPLETION_*`` variables."""

from __future__ import annotations

from completion_service.app import create_app
from completion_service.settings import CompletionSettings
from suite_common.serve import serve

__all__ = ["main"]


def main() -> None:
    settings = CompletionSettings()
    serve(create_app(settings), settings)


if __name__ == "__main__":
    main()
