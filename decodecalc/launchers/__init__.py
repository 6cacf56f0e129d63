"""One module per modeled upstream launcher. Each returns a :class:`LaunchPlan`."""
