"""The demos' stories, told with the same functions the commands call: ``stage`` (one stage on the embedded local
region: an hour of life, then a new image built, deployed and rotated under the canary gate) and ``pipeline`` (a good
and a bad candidate through every stage of a running local region). They narrate through a ``Narrator``; the commands
(``platformctl demo``, ``platformctl demo-pipeline``) render it and the report each returns."""
