"""Settings from the environment, with defaults."""

import os

DEBUG = os.environ.get("DEBUG", "1") == "1"  # TODO: debug should default to off
TIMEOUT = float(os.environ.get("TIMEOUT", "30"))
DATABASE_URL = os.environ.get("DATABASE_URL", "sqlite:///app.db")
ALLOWED_HOSTS = os.environ.get("ALLOWED_HOSTS", "*").split(",")
