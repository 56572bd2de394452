"""The multi-specialist MDT panel (`pipeline: panel`); the pipeline is in `panel.pipeline`."""
