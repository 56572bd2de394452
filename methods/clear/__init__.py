"""CLEAR as a method: its transition tables and its protocol."""
