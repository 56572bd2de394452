"""medagents as a method: how medpanel's medagents still differs from its published code."""
