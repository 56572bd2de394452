"""kamac as a method: how medpanel's kamac still differs from its published code."""
