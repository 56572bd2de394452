"""Where a run's questions and reference answers come from: data sets, files, Hugging Face."""
