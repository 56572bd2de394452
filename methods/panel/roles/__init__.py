"""panel's roles: each role's module beside its prompt files (`<role>.<part>.md`)."""
