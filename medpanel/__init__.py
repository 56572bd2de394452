"""medpanel: LLM specialist panels with a meta-level Challenger, knowledge and specialist
recruitment, and CLEAR cross-source evidence adjudication, run as reproducible ablations.

The code lives in three folders installed under this namespace: `medpanel.agents` (roles,
pipelines, model backends), `medpanel.retrieval` (corpora, retrievers, search) and
`medpanel.experiments` (scenarios, datasets, runner, reports, CLI).
"""

from importlib import metadata as _metadata

try:
    __version__ = _metadata.version("medpanel")
except _metadata.PackageNotFoundError:  # running from a source tree without install
    __version__ = "0.0.0+local"

__all__ = ["__version__"]
