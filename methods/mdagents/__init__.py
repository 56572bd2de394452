"""mdagents as a method: how medpanel's mdagents still differs from its published code."""
