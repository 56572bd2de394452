"""Libraries imported without the notices they print about their own display.

optuna's progress bar and `datasets` import `tqdm.auto`, which in a Jupyter kernel without
ipywidgets warns "IProgress not found. Please update jupyter and ipywidgets" the first time it is
imported. medpanel shows neither library's bars (its own progress is rich's), so that notice is
not about anything medpanel prints: it is filtered for the length of the import, and only it.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator


@contextlib.contextmanager
def no_widget_notice() -> Iterator[None]:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="IProgress not found", category=Warning)
        yield
