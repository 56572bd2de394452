"""The fake OpenAI-compatible server lives in the package (benchmarks use it too)."""

from benchmarks.fake_server import FakeOpenAI, completion, schema_reply

__all__ = ["FakeOpenAI", "completion", "schema_reply"]
