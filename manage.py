#!/usr/bin/env python
"""Django's command-line utility for TrainHub."""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    # `platform/` holds the trainhub package; it must never shadow the stdlib `platform`.
    sys.path.insert(0, str(Path(__file__).resolve().parent / "platform"))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "trainhub.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
