"""What a run counts and watches: its tally and stop flag, spend, endpoint health, provenance, the tracker."""
