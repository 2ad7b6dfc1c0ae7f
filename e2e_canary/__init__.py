"""e2e_canary: canary workloads that act like a platform user, what they measure, and the judgement of
those measurements: definitions (``definitions.py``), pod startup latency (``measure.py``), the runner
(``runner.py``), the stage verdict over stored results (``verdict.py``) and the judge (``judge.py``)."""
