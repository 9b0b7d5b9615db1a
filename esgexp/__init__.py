"""esgexp: config-driven evaluation and fine-tuning of LLMs on ESG question answering.

Importing the package is cheap: it only sets the offline default and registers the config
resolvers; torch, transformers, lightning and mlflow are imported where they are used.
"""

import os

# Offline by default: a hub id that is not cached fails at once instead of hanging.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from esgexp.core.config import register_resolvers

register_resolvers()
